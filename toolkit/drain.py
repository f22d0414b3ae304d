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
import json
import logging
import socket
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from .backends import Backend
from .context import JobContext
from .groupcommit import GroupCommit
from .handlers import Handler, Permanent, RateLimited, Registry, Retry
from .jobs import Job
from .manager import Failure

log = logging.getLogger("jobkit.worker")
UNKNOWN_LEASE = timedelta(minutes=5)
MAX_ERROR = 8000


@dataclass
class DrainSummary:
    """What one drain did."""

    type: str
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    snoozed: int = 0
    released: int = 0
    lost: int = 0  # fenced out: the attempt no longer held the job when it finished

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Running:
    job: Job
    lease: timedelta
    extended_at: float
    started: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Drainer:
    """Runs jobs for one worker process."""

    def __init__(self, registry: Registry, backend: Backend, *, concurrency: int = 16,
                 batch_size: int = 50, prefetch: int = 1, worker_id: str | None = None) -> None:
        self.registry = registry
        self.backend = backend
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.window = concurrency * max(prefetch, 1)  # claimed and unfinished, at most
        self.worker_id = worker_id or f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"
        self._slots = asyncio.Semaphore(concurrency)
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="jobkit-job")
        self._running: dict[UUID, _Running] = {}
        self._changed = asyncio.Event()
        self._stopping = False
        self._completer: GroupCommit[tuple[UUID, int, Any], set[UUID]] = GroupCommit(backend.complete)
        self._failer: GroupCommit[Failure, dict[UUID, str]] = GroupCommit(backend.fail)
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def drain(self, job_type: str, *, max_jobs: int | None = None,
                    budget: timedelta = timedelta(seconds=25)) -> DrainSummary:
        """Claim and run ``job_type`` jobs until none is due, ``max_jobs`` or the budget."""
        self._ensure_heartbeat()
        loop = asyncio.get_running_loop()
        handler = self.registry.get(job_type) or self._builtin(job_type)
        lease = handler.lease if handler else UNKNOWN_LEASE
        summary = DrainSummary(job_type)
        deadline = loop.time() + budget.total_seconds()
        tasks: set[asyncio.Task[None]] = set()
        limit = max_jobs if max_jobs is not None else 2**31
        while not self._stopping and summary.claimed < limit and loop.time() < deadline:
            room = await self._room(tasks)
            want = min(room, self.batch_size, limit - summary.claimed)
            jobs = await self.backend.claim(job_type, want, self.worker_id, lease,
                                            handler.rate_limit if handler else None)
            if not jobs:
                if await self._wait_for_tokens(handler, job_type, deadline):
                    continue
                break
            summary.claimed += len(jobs)
            for job in jobs:
                task = self._start(job, handler, lease, summary)
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
        return summary

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
        waiting = [r for r in self._running.values() if not r.started]
        for r in waiting:
            if r.task:
                r.task.cancel()
        busy = [r.task for r in self._running.values() if r.task and r.started]
        if busy:
            await asyncio.wait(busy, timeout=grace.total_seconds())
        late = [r for r in self._running.values() if r.task and not r.task.done()]
        for r in late:
            r.task.cancel()  # type: ignore[union-attr]
        leftovers = [(r.job.id, r.job.attempts) for r in (*waiting, *late)]
        released = await self.backend.release(leftovers) if leftovers else set()
        if self._heartbeat:
            self._heartbeat.cancel()
        self._threads.shutdown(wait=False, cancel_futures=True)
        return len(released)

    async def _room(self, tasks: set[asyncio.Task[None]]) -> int:
        """Wait until at least half the claim window is free (or nothing of ours runs)."""
        threshold = max(1, self.window // 2)
        while True:
            room = self.window - len(self._running)
            if room >= threshold or (room > 0 and not tasks):
                return room
            self._changed.clear()
            await self._changed.wait()

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

    def _start(self, job: Job, handler: Handler | None, lease: timedelta,
               summary: DrainSummary) -> asyncio.Task[None]:
        loop = asyncio.get_running_loop()
        running = _Running(job, lease, loop.time())
        self._running[job.id] = running
        running.task = asyncio.create_task(self._run(running, handler, summary))
        running.task.add_done_callback(lambda _t: self._finished(job.id))
        return running.task

    def _finished(self, job_id: UUID) -> None:
        self._running.pop(job_id, None)
        self._changed.set()

    async def _run(self, running: _Running, handler: Handler | None, summary: DrainSummary) -> None:
        job = running.job
        async with self._slots:
            running.started = True
            if self._stopping:  # claimed while shutting down: hand it straight back
                summary.released += len(await self.backend.release([(job.id, job.attempts)]))
                return
            outcome = await self._execute(job, handler, running.lease)
        await self._record(job, handler, outcome, summary)

    async def _execute(self, job: Job, handler: Handler | None, lease: timedelta) -> Any:
        """The handler's result, or the exception that ended the attempt."""
        if handler is None:
            registered = ", ".join(self.registry.types) or "none"
            return LookupError(f"no handler for job type {job.type!r} on worker {self.worker_id} "
                               f"(registered: {registered})")
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
        return _Result(result)

    async def _record(self, job: Job, handler: Handler | None, outcome: Any,
                      summary: DrainSummary) -> None:
        if isinstance(outcome, _Result):
            accepted = await self._completer.add((job.id, job.attempts, outcome.value))
            summary.completed += job.id in accepted
            summary.lost += job.id not in accepted
        elif isinstance(outcome, RateLimited):
            snoozed = await self.backend.snooze(job.id, job.attempts, outcome.retry_after)
            summary.snoozed += snoozed
            summary.lost += not snoozed
        else:
            statuses = await self._failer.add(_failure(job, handler, outcome))
            summary.failed += job.id in statuses
            summary.lost += job.id not in statuses

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        """Every second, extend the leases that have a third or less left."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            due = [r for r in self._running.values()
                   if now - r.extended_at >= r.lease.total_seconds() / 3]
            for lease in {r.lease for r in due}:
                group = [r for r in due if r.lease == lease]
                try:
                    await self.backend.extend([(r.job.id, r.job.attempts) for r in group], lease)
                except Exception:  # noqa: BLE001 - the next beat tries again
                    log.warning("heartbeat failed", exc_info=True)
                    continue
                for r in group:
                    r.extended_at = now


@dataclass(frozen=True)
class _Result:
    value: Any


def _failure(job: Job, handler: Handler | None, error: BaseException) -> Failure:
    text = _error_text(error)
    max_attempts = handler.max_attempts if handler else None
    if isinstance(error, Permanent):
        return Failure(job.id, job.attempts, text, permanent=True, max_attempts=max_attempts)
    retry_in = error.after if isinstance(error, Retry) else (
        handler.retry_delay(job.attempts) if handler else None)
    return Failure(job.id, job.attempts, text, retry_in=retry_in, max_attempts=max_attempts)


def _error_text(error: BaseException) -> str:
    if error.__traceback__ is None:
        text = f"{type(error).__name__}: {error}"
    else:
        text = "".join(traceback.format_exception(error))
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR // 2] + "\n...\n" + text[-MAX_ERROR // 2:]
