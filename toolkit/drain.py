"""Draining: claim in batches, run handlers with bounded concurrency, finish in fenced batches.

One Drainer serves a worker process. ``drain(type)`` keeps claiming until the queue is empty, the
budget is spent or ``max_jobs`` were claimed; concurrent drains share the Drainer's slots, so any
number of /run calls stays bounded. Completions and failures are grouped: whatever finished while
the previous statement was in flight goes in the next one (one round trip for many jobs).
A tending task extends the leases of running jobs and abandons handlers past their timeout (the
job is retried); ``shutdown`` stops claiming, lets running jobs finish within a grace period and
releases the rest without consuming their attempt.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from .backends import Backend
from .context import JobContext
from .handlers import Handler, Permanent, Registry
from .outcomes import DrainSummary, plain
from .recording import DrainState, Recorder, Running
from .tending import Tending

log = logging.getLogger("jobkit.worker")
UNKNOWN_LEASE = timedelta(minutes=5)


class Drainer:
    """Runs jobs for one worker process.

    ``concurrency`` slots are shared by every drain. A slot is held by a runner coroutine that takes
    claimed jobs off its drain's queue one after the other, so a job costs no task of its own; the
    outcome goes to a group commit without waiting for it, and the job leaves the claim window when
    its statement returns.
    """

    def __init__(
        self,
        registry: Registry,
        backend: Backend,
        *,
        concurrency: int = 16,
        batch_size: int = 50,
        prefetch: int = 1,
        worker_id: str | None = None,
    ) -> None:
        self.registry = registry
        self.backend = backend
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.window = concurrency * max(prefetch, 1)  # claimed and unfinished, at most
        self.worker_id = worker_id or f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"
        self._free = concurrency
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="jobkit-job")
        self._running: set[Running] = set()  # claimed and not yet settled (identity-hashed)
        self._live: list[DrainState] = []
        self._changed = asyncio.Event()
        self._stopping = False
        self._recorder = Recorder(backend, self._settled)
        shortest = min((h.timeout.total_seconds() for h in registry), default=60.0)
        self._tending = Tending(self._running, backend, tick=min(0.5, max(0.02, shortest / 10)))

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def drain(
        self, job_type: str, *, max_jobs: int | None = None, budget: timedelta = timedelta(seconds=25)
    ) -> DrainSummary:
        """Claim and run ``job_type`` jobs until none is due, ``max_jobs`` or the budget."""
        self._tending.ensure_started()
        loop = asyncio.get_running_loop()
        handler = self.registry.get(job_type) or self._builtin(job_type)
        lease = handler.lease if handler else UNKNOWN_LEASE
        d = DrainState(DrainSummary(job_type), handler)
        self._live.append(d)
        deadline = loop.time() + budget.total_seconds()
        limit = max_jobs if max_jobs is not None else 2**31
        try:
            while not self._stopping and d.summary.claimed < limit and loop.time() < deadline:
                room = await self._room(d)
                want = min(room, self.batch_size, limit - d.summary.claimed)
                jobs = await self.backend.claim(
                    job_type, want, self.worker_id, lease, handler.rate_limit if handler else None
                )
                if not jobs:
                    if await self._wait_for_tokens(handler, job_type, deadline):
                        continue
                    break
                d.summary.claimed += len(jobs)
                now = loop.time()
                for job in jobs:
                    running = Running(job, d, lease, now)
                    self._running.add(running)
                    d.queue.append(running)
                self._spawn(d)
            await self._settle(d)
        finally:
            self._live.remove(d)
        return d.summary

    async def _settle(self, d: DrainState) -> None:
        """Wait until every job this drain claimed ran (or was released) and its record returned."""
        while d.runners or d.unsettled or (d.queue and not self._stopping):
            self._spawn(d)
            await self._wait_change()
        if d.queue:  # claimed while shutting down: hand them straight back
            leftovers, d.queue = list(d.queue), deque()
            d.summary.released += len(
                await self.backend.release([(r.job.id, r.job.attempts) for r in leftovers])
            )
            for r in leftovers:
                self._running.discard(r)

    def _builtin(self, job_type: str) -> Handler | None:
        """`jobkit doctor --ping` enqueues jobkit.ping: every worker answers it."""
        if job_type != "jobkit.ping":
            return None
        worker_id = self.worker_id

        async def pong(_payload: Any, _ctx: Any) -> dict[str, str]:
            return {"pong": worker_id}

        return Handler("jobkit.ping", pong, True, timedelta(seconds=10), timedelta(seconds=40))

    async def shutdown(self, grace: timedelta = timedelta(seconds=30)) -> int:
        """Stop claiming; wait up to ``grace`` for running jobs; release the rest. Returns how
        many jobs were released."""
        self._stopping = True
        waiting = [r for d in self._live for r in d.queue]
        for d in self._live:
            d.queue.clear()
        runners = [t for d in self._live for t in d.runners]
        if runners:
            await asyncio.wait(runners, timeout=grace.total_seconds())
        for task in runners:
            task.cancel()
        late = [r for r in self._running if r.state == "running"]
        leftovers = [(r.job.id, r.job.attempts) for r in (*waiting, *late)]
        released = await self.backend.release(leftovers) if leftovers else set()
        for r in (*waiting, *late):
            self._running.discard(r)
        await self._wait_settled(10.0)
        self._tending.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)
        return len(released)

    async def _wait_settled(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                while any(d.unsettled for d in self._live):
                    await self._wait_change()
        except TimeoutError:
            log.warning("shutdown: some outcomes were still being recorded after %.0fs", timeout)

    async def _room(self, d: DrainState) -> int:
        """Wait until at least half the claim window is free (or nothing of this drain is left)."""
        threshold = max(1, self.window // 2)
        while True:
            room = self.window - len(self._running)
            if room >= threshold or (room > 0 and not d.queue and not d.runners):
                return room
            self._spawn(d)
            await self._wait_change()

    async def _wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    def _spawn(self, d: DrainState) -> None:
        """Start runners for queued jobs while slots are free (never more runners than jobs)."""
        while d.queue and self._free > 0 and len(d.runners) < len(d.queue) and not self._stopping:
            self._free -= 1
            task = asyncio.create_task(self._runner(d))
            d.runners.add(task)
            task.add_done_callback(functools.partial(self._runner_done, d))

    def _runner_done(self, d: DrainState, task: asyncio.Task[None]) -> None:
        d.runners.discard(task)
        self._free += 1
        self._changed.set()

    async def _wait_for_tokens(self, handler: Handler | None, job_type: str, deadline: float) -> bool:
        """Nothing claimed: if a rate limit held jobs back, wait for its next token (within budget)."""
        if handler is None or handler.rate_limit is None or self._stopping:
            return False
        if await self.backend.due_count(job_type) == 0:
            return False
        wait = max(await self.backend.token_wait(handler.rate_limit), 0.005)
        if asyncio.get_running_loop().time() + wait >= deadline:
            return False
        await asyncio.sleep(wait)
        return True

    async def _runner(self, d: DrainState) -> None:
        me = asyncio.current_task()
        loop = asyncio.get_running_loop()
        handler = d.handler
        timeout = handler.timeout.total_seconds() if handler else 0.0
        while d.queue and not self._stopping:
            running = d.queue.popleft()
            running.task, running.deadline, running.state = me, loop.time() + timeout, "running"
            try:
                ok, value = await self._execute(running, handler)
            except asyncio.CancelledError:
                if not running.timed_out or me is None:
                    raise  # shutdown: the job is released
                me.uncancel()
                ok, value = False, TimeoutError(
                    f"handler timed out after {timeout:g}s; the attempt was abandoned")
            else:
                if running.timed_out and me is not None and me.cancelling():
                    me.uncancel()  # the handler swallowed the cancellation and finished anyway
            running.state = "recording"
            self._recorder.record(running, ok, value)

    async def _execute(self, running: Running, handler: Handler | None) -> tuple[bool, Any]:
        """(True, the handler's result) or (False, the exception that ended the attempt)."""
        job = running.job
        if handler is None:
            registered = ", ".join(self.registry.types) or "none"
            return False, LookupError(
                f"no handler for job type {job.type!r} on worker {self.worker_id} (registered: {registered})"
            )
        loop = asyncio.get_running_loop()
        ctx = JobContext(job, backend=self.backend, loop=loop, lease=running.lease, deadline=running.deadline)
        try:
            if handler.is_async:
                result = await handler.func(job.payload, ctx)
            else:
                result = await loop.run_in_executor(self._threads, handler.func, job.payload, ctx)
            if not plain(result):
                json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            if "JSON serializable" in text or "Circular reference" in text or "JSON compliant" in text:
                return False, Permanent(f"the handler's result is not JSON-serializable: {exc}")
            return False, exc
        except Exception as exc:  # noqa: BLE001 - every handler error is recorded
            return False, exc
        return True, result

    def _settled(self, running: Running) -> None:
        self._running.discard(running)
        self._changed.set()
