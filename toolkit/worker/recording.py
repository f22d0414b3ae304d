"""Recording outcomes: completions and failures go to group commits (one fenced statement for
everything that finished while the previous one was in flight), rate-limited jobs are snoozed, and
each job is settled (leaves its worker's claim window) when its statement returns.

One job never sinks its batch: a statement the database refuses is split and retried job by job,
so a result or an error it cannot store (NUL, invalid text, too large) fails or shortens only that
job's record. Completions travel in statements of at most MAX_STATEMENT_BYTES of results. A lost
connection is retried with backoff (the outcome is kept) instead of dropping the outcomes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import operator
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

from ..exceptions import ConnectionFailed, DatabaseError
from ..jobs import Claimed, Failure
from ..retries import Permanent, RateLimited
from ..tracing import JobSpan
from .attempt import Ended, Interrupt, Outcome, Phase, Returned
from .backends import Backend
from .groupcommit import GroupCommit
from .handler import UNKNOWN_LEASE, Handler
from .metrics import Observer, Quiet
from .outcomes import DrainSummary, failure, last_line
from .progress import Reported
from .waits import Suspend

log = logging.getLogger("jobkit.worker")
T = TypeVar("T")
MAX_STATEMENT_BYTES = 64 * 1024 * 1024  # results per completion statement
RETRY_FOR = 600.0  # seconds a lost connection is retried before the outcomes are given up
RECORDING = Phase.RECORDING  # per job: an enum class attribute read goes through EnumType's hook


@dataclass(slots=True, eq=False)
class Running:
    """A claimed job until its outcome is recorded: waiting for a slot, running, or recording."""

    job: Claimed
    drain: DrainState
    lease: timedelta
    extended_at: float
    state: Phase = Phase.WAITING
    deadline: float = 0.0  # loop time after which the attempt is abandoned
    task: asyncio.Task[None] | None = None  # the runner running it
    interrupt: Interrupt | None = None  # why jobkit stopped it (tending, shutdown), if it did
    ctx: Any = None  # the handler's JobContext once it runs
    result: str | None = None  # the result's JSON text to store (completed)
    failure: Failure | None = None  # the failure to record (failed or retried)
    trace: JobSpan | None = None  # its spans, when tracing is on (tracing.py)
    reported: Reported | None = None  # its handler's progress (ctx.progress), once it reported
    thread: Any = None  # a sync handler's concurrent.futures.Future, once its thread was started


@dataclass(eq=False)
class DrainState:
    """One drain's claimed jobs waiting for a slot, its runners and its unsettled records."""

    summary: DrainSummary
    handler: Handler | None
    queue: deque[Running] = field(default_factory=deque)
    runners: set[asyncio.Task[None]] = field(default_factory=set)
    unsettled: int = 0  # outcomes handed to a statement that has not returned yet
    settles: int = 0  # jobs of this drain that left the window (recorded, released or dropped)
    claiming: int = 0  # jobs this drain's claims in flight may still bring
    claim_loops: list[asyncio.Future[str]] = field(default_factory=list)  # beyond the first one
    claim_seconds: float = 0.0  # the last claim's time, round trip included (Drainer._loops_wanted)
    round_trip: float | None = None  # measured at its first full claim (Drainer._loops_wanted)

    @property
    def busy(self) -> bool:
        """Jobs of this drain are queued, running, or ran with their outcome not yet committed."""
        return bool(self.queue or self.runners or self.unsettled)

    @property
    def lease(self) -> timedelta:
        return self.handler.lease if self.handler else UNKNOWN_LEASE


class Recorder:
    """Hands outcomes to their statements; once a statement has returned, counts its jobs as settled
    in their drains (``DrainState.settles``) and calls ``settled(jobs)``."""

    def __init__(self, backend: Backend, settled: Callable[[list[Running]], None],
                 observer: Observer | None = None) -> None:
        self.backend = backend
        self._on_settled = settled
        self.observer: Observer = observer or Quiet()
        self._completer: GroupCommit[Running, set[UUID]] = GroupCommit(self._complete, self._completed)
        self._failer: GroupCommit[Running, dict[UUID, str]] = GroupCommit(self._fail, self._failed)
        self._tasks: set[asyncio.Future[Any]] = set()  # snoozes in flight

    def complete(self, running: Running, result: str | None) -> None:
        """Hand a result (JSON text) to the completions' group commit: ``record`` of a Returned,
        the Drainer's usual case, without its dispatch."""
        running.drain.unsettled += 1
        running.state = RECORDING
        running.result = result
        if running.trace is not None:
            running.trace.recording("complete_jobs")
        self._completer.submit(running)

    def record(self, running: Running, ended: Ended) -> None:
        """Hand the outcome to its group commit; the job leaves the window when it returns."""
        if isinstance(ended, Returned):
            self.complete(running, ended.result)
            return
        running.drain.unsettled += 1
        running.state = Phase.RECORDING
        if (waiting := ended.wait) is not None:
            _traced(running, "suspend")
            task = asyncio.ensure_future(self._suspend(running, waiting))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif (limited := ended.snooze) is not None:
            _traced(running, "snooze_job")
            task = asyncio.ensure_future(self._snooze(running, limited))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            running.failure = failure(running.job, running.drain.handler, ended.error)
            _traced(running, "fail_jobs")
            self._failer.submit(running)

    async def _last_progress(self, batch: list[Running]) -> None:
        """The last progress reports of a batch's jobs, in one statement before their outcomes
        (issue 23: one statement, and one commit, per job cost a drain of short jobs 90% of its
        throughput). Best effort, as every progress write: the outcome is recorded regardless."""
        boxes = [(r, r.reported) for r in batch
                 if r.reported is not None and r.reported.pending and r.reported.value is not None]
        if not boxes:
            return
        try:
            await self.backend.progress([(r.job.id, r.job.attempts, box.value or {}) for r, box in boxes])
        except Exception:  # noqa: BLE001 - progress is best effort
            log.warning("writing the last progress of %d jobs failed", len(boxes), exc_info=True)
            return
        for _r, box in boxes:
            box.written = box.version

    async def _complete(self, batch: list[Running]) -> set[UUID]:
        started = time.perf_counter()
        await self._last_progress(batch)
        accepted: set[UUID] = set()
        for chunk in _by_size(batch):
            accepted |= await self._complete_chunk(chunk)
        self.observer.recorded(time.perf_counter() - started)
        return accepted

    async def _complete_chunk(self, batch: list[Running]) -> set[UUID]:
        try:
            return await _retrying(lambda: self.backend.complete(
                [(r.job.id, r.job.attempts, r.result) for r in batch]))
        except ConnectionFailed:
            raise
        except DatabaseError as exc:  # one result the database refuses must not sink the rest
            if len(batch) > 1:  # find it: one statement each
                accepted: set[UUID] = set()
                for r in batch:
                    accepted |= await self._complete_chunk([r])
                return accepted
            r = batch[0]  # say, \u0000 in a string: the attempt fails instead (its failer settles it)
            r.state = Phase.REFUSED
            r.failure = failure(r.job, r.drain.handler,
                                Permanent(f"the result cannot be stored: {exc.message}"))
            self._failer.submit(r)
            return set()

    def _completed(self, batch: list[Running], accepted: set[UUID] | None,
                   error: BaseException | None) -> None:
        if error is not None:
            log.error("recording %d completions failed (their leases will expire): %s", len(batch), error)
        if accepted is not None and len(accepted) == len(batch):  # the usual case: no lookups
            self._all_completed(batch)
            return
        done: dict[str, int] = {}
        for r in batch:
            if r.state is Phase.REFUSED:
                continue
            if accepted is not None and r.job.id in accepted:
                outcome = Outcome.COMPLETED
                done[r.job.type] = done.get(r.job.type, 0) + 1
            else:
                outcome = Outcome.LOST if error is None else Outcome.UNRECORDED
            self._ended(r, outcome, len(batch))
        for job_type, count in done.items():
            self.observer.completed(job_type, count)

    def _all_completed(self, batch: list[Running]) -> None:
        """Every job of the batch completed: counted per drain (and type, for the observer), their
        spans ended, and settled in one call; nothing per job but the spans of traced ones."""
        for r in batch:
            if r.trace is not None:
                r.trace.settled(Outcome.COMPLETED, len(batch))
        for d, n in Counter(map(_drain_of, batch)).items():
            d.summary.completed += n
            d.unsettled -= n
            d.settles += n
        if type(self.observer) is not Quiet:
            for job_type, n in Counter(r.job.type for r in batch).items():
                self.observer.completed(job_type, n)
        self._on_settled(batch)

    async def _fail(self, batch: list[Running]) -> dict[UUID, str]:
        started = time.perf_counter()
        await self._last_progress(batch)
        try:
            return await _retrying(lambda: self.backend.fail([_failure(r) for r in batch]))
        except ConnectionFailed:
            raise
        except DatabaseError as exc:
            if len(batch) > 1:
                statuses: dict[UUID, str] = {}
                for r in batch:
                    statuses |= await self._fail([r])
                return statuses
            return await self._fail_plainly(batch[0], exc)
        finally:
            self.observer.recorded(time.perf_counter() - started)

    async def _fail_plainly(self, r: Running, exc: DatabaseError) -> dict[UUID, str]:
        """The database refused this failure's record: store a plain message in its place."""
        original = _failure(r)
        r.failure = dataclasses.replace(original, error=(
            f"{last_line(original.error)[:500]!a} (the full error could not be stored: {exc.message})"))
        try:
            return await self.backend.fail([r.failure])
        except DatabaseError as again:
            log.error("job %s: its failure cannot be recorded (its lease will expire): %s",
                      r.job.id, again.message)
            return {}

    def _failed(self, batch: list[Running], statuses: dict[UUID, str] | None,
                error: BaseException | None) -> None:
        if error is not None:
            log.error("recording %d failures failed (their leases will expire): %s", len(batch), error)
        for r in batch:
            status = statuses.get(r.job.id) if statuses is not None else None
            if status is not None:
                outcome = Outcome.RETRY if status == "pending" else Outcome.FAILED
                self.observer.failed(r.job.type, final=outcome is Outcome.FAILED)
                _log_failure(r, outcome)
            else:
                outcome = Outcome.LOST if error is None else Outcome.UNRECORDED
            self._ended(r, outcome, len(batch))

    async def _snooze(self, running: Running, limited: RateLimited) -> None:
        outcome = Outcome.UNRECORDED
        try:
            snoozed = await _retrying(lambda: self.backend.snooze(
                running.job.id, running.job.attempts, limited.retry_after))
        except Exception as exc:  # noqa: BLE001 - the lease expires and the sweep retries it
            log.error("snoozing job %s failed: %s", running.job.id, exc)
        else:
            if snoozed:
                self.observer.snoozed(running.job.type)
            outcome = Outcome.SNOOZED if snoozed else Outcome.LOST
        finally:
            self._ended(running, outcome)

    async def _suspend(self, running: Running, waiting: Suspend) -> None:
        outcome = Outcome.UNRECORDED
        try:
            status = await _retrying(lambda: self.backend.suspend(
                running.job.id, running.job.attempts, waiting.wait))
        except Exception as exc:  # noqa: BLE001 - the lease expires and the sweep retries it (it replays)
            log.error("recording the wait of job %s failed: %s", running.job.id, exc)
        else:
            outcome = Outcome.WAITED if status is not None else Outcome.LOST
        finally:
            self._ended(running, outcome)

    def _ended(self, running: Running, outcome: Outcome, batch: int = 1) -> None:
        """The attempt's outcome is known: counted, its spans ended, and the job settled."""
        running.drain.summary.count(outcome)
        if running.trace is not None:
            running.trace.settled(outcome, batch)
        self._settled(running)

    def _settled(self, running: Running) -> None:
        running.drain.unsettled -= 1
        running.drain.settles += 1
        self._on_settled([running])


_drain_of = operator.attrgetter("drain")


def _traced(running: Running, statement: str) -> None:
    if running.trace is not None:
        running.trace.recording(statement)


def _failure(r: Running) -> Failure:
    if r.failure is None:  # pragma: no cover - only failed attempts reach the failer
        raise AssertionError(f"job {r.job.id}: no failure to record")
    return r.failure


def _log_failure(r: Running, outcome: Outcome) -> None:
    job, error = r.job, last_line(_failure(r).error)
    if outcome is Outcome.RETRY:
        log.warning("job %s (%s) attempt %d failed, will retry: %s", job.id, job.type, job.attempts, error)
    else:
        log.error("job %s (%s) failed for good after attempt %d (it will be dead-lettered): %s",
                  job.id, job.type, job.attempts, error)


def _by_size(batch: list[Running]) -> Iterator[list[Running]]:
    """Consecutive chunks whose results add up to at most MAX_STATEMENT_BYTES (one job at least)."""
    chunk: list[Running] = []
    size = 0
    for r in batch:
        length = len(r.result) if r.result is not None else 4
        if chunk and size + length > MAX_STATEMENT_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(r)
        size += length
    if chunk:
        yield chunk


async def _retrying(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, tried again with backoff while the connection is lost, for up to RETRY_FOR."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RETRY_FOR
    delay = 0.1
    while True:
        try:
            return await call()
        except ConnectionFailed as exc:
            if loop.time() + delay > deadline:
                raise
            log.warning("recording outcomes: %s; retrying in %.1fs", exc.message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
