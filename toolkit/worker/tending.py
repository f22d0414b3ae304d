"""Tending the running jobs of a Drainer: abandon handlers past their timeout, extend leases,
write the progress handlers reported (throttled: worker/progress.py).

One task per worker process instead of a timer per job: every ``tick`` it cancels the runner of
any job past its deadline (the runner records a TimeoutError and the job is retried), and once a
second it extends, in one statement per lease length, the leases that have a third or less left,
and asks (one read) which of the held jobs no longer belong to this worker: a job cancelled while
it runs gets ``ctx.cancelled`` (and an async handler's task is cancelled; a sync handler that goes
on is abandoned at its timeout), one cancelled while it waits for a slot is dropped.
A timeout therefore fires within one tick of its deadline; the tick is a tenth of the shortest
handler timeout, between 20 ms and 0.5 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from datetime import timedelta
from typing import Any, Protocol

from .attempt import Interrupt, Phase, stronger
from .backends import Backend
from .progress import FLUSH_EVERY, Reported
from .supervise import TaskState, supervise

log = logging.getLogger("jobkit.worker")
BEAT = 1.0  # seconds between lease checks


class Tended(Protocol):
    """What tending reads and sets on a running job (drain._Running)."""

    job: Any
    lease: timedelta
    extended_at: float
    state: Phase
    deadline: float
    task: asyncio.Task[None] | None
    interrupt: Interrupt | None
    ctx: Any
    drain: Any
    reported: Reported | None


class Tending:
    def __init__(self, running: Collection[Tended], backend: Backend, *, tick: float) -> None:
        self._running = running
        self._backend = backend
        self.tick = tick
        self._task: asyncio.Task[None] | None = None
        self.status = TaskState("tending")  # supervised: a failing loop is restarted (supervise.py)

    def ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(supervise(self.status, self._loop))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + BEAT
        while True:
            await asyncio.sleep(self.tick)
            now = loop.time()
            self.abandon_overdue(now)
            due = [r for r in self._running if r.reported is not None and r.reported.pending
                   and now - r.reported.written_at >= FLUSH_EVERY]
            if due:
                await self.write_progress(due, now)
            if now >= next_beat:
                next_beat = now + BEAT
                await self.extend_leases(now)
                await self.check_cancelled()

    def abandon_overdue(self, now: float) -> int:
        """Cancel the runners of jobs past their deadline, once each; returns how many. A cancelled
        job's runner is cancelled here too unless it already was (an async handler's, at once):
        it stays cancelled (Interrupt), and its sync handler's thread is abandoned."""
        overdue = [r for r in self._running if r.state == Phase.RUNNING and now >= r.deadline
                   and r.task is not None and _may_time_out(r)]
        for r in overdue:
            r.interrupt = stronger(r.interrupt, Interrupt.TIMED_OUT)
            if r.task is not None:
                r.task.cancel()
        return len(overdue)

    async def check_cancelled(self) -> int:
        """Find the held jobs that were cancelled; tell their handlers. Returns how many."""
        held = [r for r in self._running if r.state in (Phase.WAITING, Phase.RUNNING)
                and r.interrupt is not Interrupt.CANCELLED]
        if not held:
            return 0
        try:
            lost = await self._backend.running_check([(r.job.id, r.job.attempts) for r in held])
        except Exception:  # noqa: BLE001 - the next beat asks again
            log.warning("checking for cancelled jobs failed", exc_info=True)
            return 0
        stopped = [r for r in held if lost.get(r.job.id) == "cancelled"]
        for r in stopped:
            handler = r.drain.handler
            if (r.state == Phase.RUNNING and r.interrupt is None and r.task is not None
                    and handler is not None and handler.is_async):
                r.task.cancel()  # a runner already cancelled (timeout, shutdown) is not cancelled twice
            r.interrupt = stronger(r.interrupt, Interrupt.CANCELLED)
            if r.ctx is not None:
                r.ctx.cancelled = r.ctx.lost = True
        return len(stopped)

    async def extend_leases(self, now: float) -> None:
        """Extend the leases with a third or less left, one statement per lease length."""
        due = [r for r in self._running if now - r.extended_at >= r.lease.total_seconds() / 3]
        for lease in {r.lease for r in due}:
            group = [r for r in due if r.lease == lease]
            try:
                await self._backend.extend([(r.job.id, r.job.attempts) for r in group], lease)
            except Exception:  # noqa: BLE001 - the next beat tries again
                log.warning("heartbeat failed", exc_info=True)
                continue
            for r in group:
                r.extended_at = now

    async def write_progress(self, group: Sequence[Tended], now: float) -> None:
        """Write the latest progress of ``group``'s jobs in one statement (fenced: a job that is no
        longer this attempt's is left alone). A failed write is tried again on a later tick."""
        reports = []
        for r in group:
            box = r.reported
            if box is not None and box.value is not None:
                version = box.version
                reports.append((r, box, version, (r.job.id, r.job.attempts, box.value)))
        try:
            await self._backend.progress([item for _r, _b, _v, item in reports])
        except Exception:  # noqa: BLE001 - progress is best effort: the next tick tries again
            log.warning("writing progress failed", exc_info=True)
            return
        for _r, box, version, _item in reports:
            box.written, box.written_at = version, now


def _may_time_out(r: Tended) -> bool:
    """Not timed out yet: nothing stopped it, a shutdown did (a timeout is stronger), or cancel_job
    did and its runner was not cancelled (a sync handler that goes on: abandoned now, once). A
    runner acknowledges (uncancels) jobkit's cancellations only when its attempt leaves RUNNING,
    so ``cancelling()`` says whether one is pending."""
    if r.interrupt is Interrupt.CANCELLED:
        return r.task is not None and not r.task.cancelling()
    return r.interrupt is not Interrupt.TIMED_OUT
