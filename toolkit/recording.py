"""Recording outcomes: completions and failures go to group commits (one fenced statement for
everything that finished while the previous one was in flight), rate-limited jobs are snoozed, and
each job is settled (leaves its worker's claim window) when its statement returns."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from .backends import Backend
from .exceptions import ConnectionFailed
from .groupcommit import GroupCommit
from .handlers import Handler, Permanent, RateLimited
from .jobs import Claimed
from .outcomes import DrainSummary, failure

log = logging.getLogger("jobkit.worker")


@dataclass(slots=True, eq=False)
class Running:
    """A claimed job until its outcome is recorded: waiting for a slot, running, or recording."""

    job: Claimed
    drain: DrainState
    lease: timedelta
    extended_at: float
    state: str = "waiting"
    deadline: float = 0.0  # loop time after which the attempt is abandoned
    task: asyncio.Task[None] | None = None  # the runner running it
    timed_out: bool = False
    outcome: Any = None  # the result to store, or the Failure to record


@dataclass(eq=False)
class DrainState:
    """One drain's claimed jobs waiting for a slot, its runners and its unsettled records."""

    summary: DrainSummary
    handler: Handler | None
    queue: deque[Running] = field(default_factory=deque)
    runners: set[asyncio.Task[None]] = field(default_factory=set)
    unsettled: int = 0  # outcomes handed to a statement that has not returned yet


class Recorder:
    """Hands outcomes to their statements; calls ``settled(running)`` once each has returned."""

    def __init__(self, backend: Backend, settled: Callable[[Running], None]) -> None:
        self.backend = backend
        self._on_settled = settled
        self._completer: GroupCommit[Running, set[UUID]] = GroupCommit(self._complete, self._completed)
        self._failer: GroupCommit[Running, dict[UUID, str]] = GroupCommit(self._fail, self._failed)
        self._tasks: set[asyncio.Future[Any]] = set()  # snoozes in flight

    def record(self, running: Running, ok: bool, value: Any) -> None:
        """Hand the outcome to its group commit; the job leaves the window when it returns."""
        running.drain.unsettled += 1
        if ok:
            running.outcome = value
            self._completer.submit(running)
        elif isinstance(value, RateLimited):
            task = asyncio.ensure_future(self._snooze(running, value))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            running.outcome = failure(running.job, running.drain.handler, value)
            self._failer.submit(running)

    async def _complete(self, batch: list[Running]) -> set[UUID]:
        try:
            return await self.backend.complete([(r.job.id, r.job.attempts, r.outcome) for r in batch])
        except ConnectionFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - one result the database refuses must not sink the rest
            if len(batch) > 1:  # find it: one statement each
                accepted: set[UUID] = set()
                for r in batch:
                    accepted |= await self._complete([r])
                return accepted
            r = batch[0]  # say, \u0000 in a string: the attempt fails instead (its failer settles it)
            r.state = "refused"
            r.outcome = failure(r.job, r.drain.handler, Permanent(f"the result cannot be stored: {exc}"))
            self._failer.submit(r)
            return set()

    def _completed(self, batch: list[Running], accepted: set[UUID] | None,
                   error: BaseException | None) -> None:
        if error is not None:
            log.error("recording %d completions failed (their leases will expire): %s", len(batch), error)
        everyone = accepted is not None and len(accepted) == len(batch)  # the usual case: no lookups
        for r in batch:
            if r.state == "refused":
                continue
            if everyone or (accepted is not None and r.job.id in accepted):
                r.drain.summary.completed += 1
            elif error is None:
                r.drain.summary.lost += 1
            self._settled(r)

    async def _fail(self, batch: list[Running]) -> dict[UUID, str]:
        return await self.backend.fail([r.outcome for r in batch])

    def _failed(self, batch: list[Running], statuses: dict[UUID, str] | None,
                error: BaseException | None) -> None:
        if error is not None:
            log.error("recording %d failures failed (their leases will expire): %s", len(batch), error)
        for r in batch:
            if statuses is not None and r.job.id in statuses:
                r.drain.summary.failed += 1
            elif error is None:
                r.drain.summary.lost += 1
            self._settled(r)

    async def _snooze(self, running: Running, limited: RateLimited) -> None:
        try:
            snoozed = await self.backend.snooze(running.job.id, running.job.attempts, limited.retry_after)
        except Exception as exc:  # noqa: BLE001 - the lease expires and the sweep retries it
            log.error("snoozing job %s failed: %s", running.job.id, exc)
        else:
            running.drain.summary.snoozed += snoozed
            running.drain.summary.lost += not snoozed
        finally:
            self._settled(running)

    def _settled(self, running: Running) -> None:
        running.drain.unsettled -= 1
        self._on_settled(running)
