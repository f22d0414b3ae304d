"""When each job type drains in a worker: on a wake-up, when its next job becomes due, to catch up.

The database wakes a worker for a type (POST /run over pg_net, or a NOTIFY). The Dispatcher runs
one drain per type at a time; a wake-up that arrives meanwhile makes that drain go round once more
(and cuts its lingering short). A drain claims until the type is empty, then lingers briefly for
jobs that arrive right after: pg_net sends a burst's later wake-ups only on its next loop, about a
second later, and one drain serves the whole burst instead. In the background, a drain whose
budget ran out goes on at once: it stops only when the type is empty.

When the type is empty, the Dispatcher asks the database when its next pending job becomes due (a
retry, a snooze, a delayed job) and sets a timer for that moment, so nothing due waits for the cron
wake-up while a worker runs. Wake-ups for delayed enqueues carry such a due time too (``at``).

Coalescing (0010): while a drain runs, the Dispatcher tells the database the type is draining
(``wake_draining``, refreshed every HEARTBEAT), so enqueues of the type send no wake-up: the drain
or its lingering claims their jobs. When the drain has found the type empty, ``wake_idle`` ends
that, but only once no enqueue that skipped its wake-up is still in flight (else the Dispatcher
looks for jobs again first); then one last look for due jobs sees every such enqueue's job. A
stopping worker hands the type over: idle, and a wake-up for what is still due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from datetime import timedelta

from ..exceptions import ConnectionFailed, JobkitError
from .drain import Drainer
from .outcomes import DrainSummary

log = logging.getLogger("jobkit.worker")
RETRY_UNREACHABLE = 1.0  # seconds before a drain that lost the database is tried again
RETRY_UNCLAIMABLE = 1.0  # due jobs this worker could not claim (locked elsewhere, no tokens)
EARLY = 0.002  # timers fire this much after the due time (the database's now() must have passed it)
HEARTBEAT = 1.0  # seconds between a drain's wake_draining refreshes
DRAINING_FOR = timedelta(seconds=3)  # how long each refresh holds off enqueues' wake-ups
IDLE_RETRY = 0.05  # seconds before looking again when an enqueue that relied on the drain is in flight


class Dispatcher:
    """One drain per job type at a time, started by wake-ups and by due-time timers."""

    def __init__(self, drainer: Drainer, *, budget: timedelta = timedelta(seconds=25),
                 linger: float = 0.0, handled: Iterable[str] | None = None) -> None:
        self.drainer = drainer
        self.backend = drainer.backend
        self.budget = budget
        self.linger = linger
        self.handled = set(handled if handled is not None else drainer.registry.types)
        self._active: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._poked: dict[str, asyncio.Event] = {}
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}

    @property
    def draining(self) -> list[str]:
        return sorted(self._active)

    @property
    def timers(self) -> dict[str, float]:
        """Type -> the event loop's time at which its timer fires."""
        return {t: when for t, (when, _h) in sorted(self._timers.items())}

    def wake(self, job_type: str, at: float | None = None) -> None:
        """Drain ``job_type`` now, or at ``at`` (a Unix time) when that lies in the future."""
        if self.drainer.stopping:
            return
        if at is not None and at - time.time() > 0:
            self._arm(job_type, at - time.time())
            return
        if job_type in self._active:
            self._again.add(job_type)
            self._poked[job_type].set()
            return
        self._poked[job_type] = asyncio.Event()
        self._active[job_type] = asyncio.create_task(self._loop(job_type))

    async def catch_up(self) -> None:
        """Drain every handled type that has pending jobs (each drain ends by setting the timer
        for the type's next due job): after a start or a reconnect, nothing waits for cron."""
        for job_type in await self.backend.due_types():
            if job_type in self.handled or job_type == "jobkit.ping":
                self.wake(job_type)

    async def stop(self) -> None:
        """Cancel the timers and wait for the drains (Drainer.shutdown ends them)."""
        for _when, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._active:
            await asyncio.wait(list(self._active.values()), timeout=10)

    async def _loop(self, job_type: str) -> None:
        looked_again = False  # went round once because a job was due right after going idle
        try:
            while True:
                self._again.discard(job_type)
                summary = await self._drain(job_type)
                if summary.claimed:
                    log.info("drained %s: %s", job_type, summary.as_dict())
                if self.drainer.stopping:
                    await self._hand_over(job_type)
                    return
                if summary.ended == "unreachable":
                    self._arm(job_type, RETRY_UNREACHABLE)
                    return
                if summary.ended == "budget" or job_type in self._again:
                    continue
                if not await self.backend.wake_idle(job_type):
                    await asyncio.sleep(IDLE_RETRY)  # an enqueue that relied on this drain is in flight
                    continue
                # idle: this last look sees the job of every enqueue that skipped its wake-up
                await self._arm_next(job_type, claimed=summary.claimed > 0 or not looked_again)
                if job_type not in self._again:
                    return
                looked_again = summary.claimed == 0
        except ConnectionFailed as exc:
            log.warning("drain of %s: %s; trying again in %.0fs", job_type, exc.message, RETRY_UNREACHABLE)
            self._arm(job_type, RETRY_UNREACHABLE)
        except Exception:  # noqa: BLE001 - a bug must not end the worker: log it, try again later
            log.exception("drain of %s failed; trying again in 5s", job_type)
            self._arm(job_type, 5.0)
        finally:
            self._active.pop(job_type, None)
            self._poked.pop(job_type, None)

    async def _drain(self, job_type: str) -> DrainSummary:
        """One drain, with the type marked draining in the database while it runs (the refreshes
        have ended, not just been cancelled, when this returns: none can land after wake_idle)."""
        done = asyncio.Event()
        beat = asyncio.create_task(self._heartbeat(job_type, done))
        try:
            return await self.drainer.drain(job_type, budget=self.budget, linger=self.linger,
                                            poked=self._poked[job_type])
        finally:
            done.set()
            await beat

    async def _heartbeat(self, job_type: str, done: asyncio.Event) -> None:
        while not done.is_set():
            try:
                await self.backend.wake_draining(job_type, DRAINING_FOR)
            except JobkitError as exc:  # the mark lapses by itself: enqueues just send wake-ups
                log.debug("wake_draining %s: %s", job_type, exc.message)
            try:
                async with asyncio.timeout(HEARTBEAT):
                    await done.wait()
            except TimeoutError:
                pass

    async def _hand_over(self, job_type: str) -> None:
        """Stopping: enqueues wake again, and another worker is woken for what is still due."""
        try:
            await self.backend.wake_idle(job_type, handoff=True)
        except JobkitError as exc:  # the draining mark lapses; the cron wake-up covers the rest
            log.warning("could not hand %s over to another worker: %s", job_type, exc.message)

    async def _arm_next(self, job_type: str, *, claimed: bool) -> None:
        """Set the timer for the type's next pending job (none pending: no timer)."""
        due_in = await self.backend.next_due(job_type)
        if due_in is None:
            return
        if due_in > 0:
            self._arm(job_type, due_in + EARLY)
        elif claimed:
            self._again.add(job_type)  # became due as the drain ended: go round again
        else:
            log.debug("%s: due jobs, none claimable; trying again in %.0fs", job_type, RETRY_UNCLAIMABLE)
            self._arm(job_type, RETRY_UNCLAIMABLE)  # due, yet nothing was claimable

    def _arm(self, job_type: str, delay: float) -> None:
        """A timer that wakes ``job_type`` after ``delay`` seconds (an earlier one is kept)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        current = self._timers.get(job_type)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()
        self._timers[job_type] = (when, loop.call_at(when, self._fire, job_type))

    def _fire(self, job_type: str) -> None:
        self._timers.pop(job_type, None)
        self.wake(job_type)
