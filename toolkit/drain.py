"""Draining: claim in batches, run handlers with bounded concurrency, finish in fenced batches.

One Drainer serves a worker process. ``drain(type)`` keeps claiming until the queue is empty, the
budget is spent or ``max_jobs`` were claimed; concurrent drains share the Drainer's slots, so any
number of /run calls stays bounded. Completions and failures are grouped: whatever finished while
the previous statement was in flight goes in the next one (one round trip for many jobs).
Leases of running jobs are extended automatically; a handler past its timeout is abandoned and its
job retried; ``shutdown`` stops claiming, lets running jobs finish within a grace period and
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from .backends import Backend
from .context import JobContext
from .groupcommit import GroupCommit
from .handlers import Handler, Permanent, RateLimited, Registry
from .jobs import Job
from .manager import Failure
from .outcomes import DrainSummary, Result, failure

log = logging.getLogger("jobkit.worker")
UNKNOWN_LEASE = timedelta(minutes=5)
MAX_ERROR = 8000


@dataclass
class _Running:
    """A claimed job until its outcome is recorded: waiting for a slot, running, or recording."""

    job: Job
    lease: timedelta
    extended_at: float
    state: str = "waiting"


@dataclass
class _Drain:
    """One drain's claimed jobs waiting for a slot, its runners and its unsettled records."""

    summary: DrainSummary
    handler: Handler | None
    queue: deque[_Running] = field(default_factory=deque)
    runners: set[asyncio.Task[None]] = field(default_factory=set)
    records: set[asyncio.Future[Any]] = field(default_factory=set)


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
        self._running: dict[UUID, _Running] = {}
        self._live: list[_Drain] = []
        self._changed = asyncio.Event()
        self._stopping = False
        self._completer: GroupCommit[tuple[UUID, int, Any], set[UUID]] = GroupCommit(backend.complete)
        self._failer: GroupCommit[Failure, dict[UUID, str]] = GroupCommit(backend.fail)
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def drain(
        self, job_type: str, *, max_jobs: int | None = None, budget: timedelta = timedelta(seconds=25)
    ) -> DrainSummary:
        """Claim and run ``job_type`` jobs until none is due, ``max_jobs`` or the budget."""
        self._ensure_heartbeat()
        loop = asyncio.get_running_loop()
        handler = self.registry.get(job_type) or self._builtin(job_type)
        lease = handler.lease if handler else UNKNOWN_LEASE
        d = _Drain(DrainSummary(job_type), handler)
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
                    running = _Running(job, lease, now)
                    self._running[job.id] = running
                    d.queue.append(running)
                self._spawn(d)
            await self._settle(d)
        finally:
            self._live.remove(d)
        return d.summary

    async def _settle(self, d: _Drain) -> None:
        """Wait until every job this drain claimed ran (or was released) and its record returned."""
        while d.runners or (d.queue and not self._stopping):
            self._spawn(d)
            if d.runners:
                await asyncio.wait(set(d.runners))
            else:
                await self._wait_change()
        if d.queue:  # claimed while shutting down: hand them straight back
            leftovers, d.queue = list(d.queue), deque()
            d.summary.released += len(
                await self.backend.release([(r.job.id, r.job.attempts) for r in leftovers])
            )
            for r in leftovers:
                self._finished(r.job.id)
        if d.records:
            await asyncio.wait(set(d.records))

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
        late = [r for r in self._running.values() if r.state == "running"]
        leftovers = [(r.job.id, r.job.attempts) for r in (*waiting, *late)]
        released = await self.backend.release(leftovers) if leftovers else set()
        for r in (*waiting, *late):
            self._finished(r.job.id)
        records = [f for d in self._live for f in d.records]
        if records:
            await asyncio.wait(records, timeout=10)
        if self._heartbeat:
            self._heartbeat.cancel()
        self._threads.shutdown(wait=False, cancel_futures=True)
        return len(released)

    async def _room(self, d: _Drain) -> int:
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

    def _spawn(self, d: _Drain) -> None:
        """Start runners for queued jobs while slots are free (never more runners than jobs)."""
        while d.queue and self._free > 0 and len(d.runners) < len(d.queue) and not self._stopping:
            self._free -= 1
            task = asyncio.create_task(self._runner(d))
            d.runners.add(task)
            task.add_done_callback(functools.partial(self._runner_done, d))

    def _runner_done(self, d: _Drain, task: asyncio.Task[None]) -> None:
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

    async def _runner(self, d: _Drain) -> None:
        while d.queue and not self._stopping:
            running = d.queue.popleft()
            running.state = "running"
            outcome = await self._execute(running.job, d.handler, running.lease)
            running.state = "recording"
            self._record(d, running.job, outcome)

    def _finished(self, job_id: UUID) -> None:
        self._running.pop(job_id, None)
        self._changed.set()

    async def _execute(self, job: Job, handler: Handler | None, lease: timedelta) -> Any:
        """The handler's result, or the exception that ended the attempt."""
        if handler is None:
            registered = ", ".join(self.registry.types) or "none"
            return LookupError(
                f"no handler for job type {job.type!r} on worker {self.worker_id} (registered: {registered})"
            )
        loop = asyncio.get_running_loop()
        timeout = handler.timeout.total_seconds()
        ctx = JobContext(job, backend=self.backend, loop=loop, lease=lease, deadline=loop.time() + timeout)
        try:
            async with asyncio.timeout(timeout):  # no extra task per job, unlike wait_for
                if handler.is_async:
                    result = await handler.func(job.payload, ctx)
                else:
                    result = await loop.run_in_executor(self._threads, handler.func, job.payload, ctx)
            json.dumps(result)
        except TimeoutError:
            return TimeoutError(f"handler timed out after {timeout:g}s; the attempt was abandoned")
        except (TypeError, ValueError) as exc:
            if "JSON serializable" in str(exc) or "Circular reference" in str(exc):
                return Permanent(f"the handler's result is not JSON-serializable: {exc}")
            return exc
        except Exception as exc:  # noqa: BLE001 - every handler error is recorded
            return exc
        return Result(result)

    def _record(self, d: _Drain, job: Job, outcome: Any) -> None:
        """Hand the outcome to its group commit; the job leaves the window when it returns."""
        summary = d.summary
        if isinstance(outcome, Result):
            future: asyncio.Future[Any] = self._completer.submit((job.id, job.attempts, outcome.value))

            def done(accepted: set[UUID]) -> None:
                summary.completed += job.id in accepted
                summary.lost += job.id not in accepted
        elif isinstance(outcome, RateLimited):
            future = asyncio.ensure_future(self.backend.snooze(job.id, job.attempts, outcome.retry_after))

            def done(snoozed: bool) -> None:  # type: ignore[misc]
                summary.snoozed += snoozed
                summary.lost += not snoozed
        else:
            future = self._failer.submit(failure(job, d.handler, outcome))

            def done(statuses: dict[UUID, str]) -> None:  # type: ignore[misc]
                summary.failed += job.id in statuses
                summary.lost += job.id not in statuses

        d.records.add(future)
        future.add_done_callback(functools.partial(self._recorded, d, job.id, done))

    def _recorded(
        self, d: _Drain, job_id: UUID, done: Callable[[Any], None], future: asyncio.Future[Any]
    ) -> None:
        d.records.discard(future)
        self._finished(job_id)
        if future.cancelled():
            return
        if future.exception() is not None:
            log.error("recording the outcome of job %s failed: %s", job_id, future.exception())
            return
        done(future.result())

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        """Every second, extend the leases that have a third or less left."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            due = [r for r in self._running.values() if now - r.extended_at >= r.lease.total_seconds() / 3]
            for lease in {r.lease for r in due}:
                group = [r for r in due if r.lease == lease]
                try:
                    await self.backend.extend([(r.job.id, r.job.attempts) for r in group], lease)
                except Exception:  # noqa: BLE001 - the next beat tries again
                    log.warning("heartbeat failed", exc_info=True)
                    continue
                for r in group:
                    r.extended_at = now
