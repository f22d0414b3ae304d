"""Tending: overdue handlers are abandoned (their runner cancelled), leases with a third or less
left are extended (over the in-memory backend: the conformance suite holds it to the SQL)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobkit.jobs import NewJob
from jobkit.worker.attempt import Interrupt
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.tending import Tending


@dataclass(eq=False)
class _Job:
    job: Any
    lease: timedelta
    extended_at: float
    state: str = "running"
    deadline: float = 0.0
    task: asyncio.Task[None] | None = None
    interrupt: Interrupt | None = None


def test_only_running_jobs_past_their_deadline_are_abandoned() -> None:
    async def main() -> list[bool]:
        sleepers = [asyncio.create_task(asyncio.sleep(10)) for _ in range(3)]
        overdue = _Job(None, timedelta(minutes=1), 0.0, deadline=5.0, task=sleepers[0])
        in_time = _Job(None, timedelta(minutes=1), 0.0, deadline=50.0, task=sleepers[1])
        waiting = _Job(None, timedelta(minutes=1), 0.0, state="waiting", deadline=5.0, task=sleepers[2])
        tending = Tending({overdue, in_time, waiting}, None, tick=0.1)  # type: ignore[arg-type]
        assert tending.abandon_overdue(now=10.0) == 1
        assert tending.abandon_overdue(now=10.0) == 0  # never twice
        await asyncio.wait([sleepers[0]])  # its cancellation has landed
        flags = [j.interrupt is Interrupt.TIMED_OUT for j in (overdue, in_time, waiting)]
        for t in sleepers:
            t.cancel()
        return flags + [sleepers[0].cancelled()]

    assert asyncio.run(main()) == [True, False, False, True]


def test_a_cancelled_attempt_past_its_deadline_is_abandoned_once_and_stays_cancelled() -> None:
    """A sync handler that goes on after cancel_job: its runner is cancelled at its timeout, once
    (the cancellation is pending until the runner acknowledges it), and it stays CANCELLED."""
    async def main() -> list[object]:
        sleeper = asyncio.create_task(asyncio.sleep(10))
        job = _Job(None, timedelta(minutes=1), 0.0, deadline=5.0, task=sleeper, interrupt=Interrupt.CANCELLED)
        tending = Tending({job}, None, tick=0.1)  # type: ignore[arg-type]
        counts = [tending.abandon_overdue(now=10.0), tending.abandon_overdue(now=10.0)]
        await asyncio.wait([sleeper])
        return [*counts, job.interrupt, sleeper.cancelled()]

    assert asyncio.run(main()) == [1, 0, Interrupt.CANCELLED, True]


def test_leases_with_a_third_or_less_left_are_extended() -> None:
    backend = MemoryBackend()

    async def main() -> None:
        await backend.enqueue_many([NewJob("t", {"i": i}) for i in range(2)])
        stale, fresh = await backend.claim("t", 2, "w", timedelta(seconds=30))
        jobs = {_Job(stale, timedelta(minutes=10), extended_at=0.0),
                _Job(fresh, timedelta(minutes=10), extended_at=500.0)}
        await Tending(jobs, backend, tick=0.1).extend_leases(now=500.0)  # 500 s >= 600 s / 3
        left = {j.id: j.lease_expires_at - datetime.now(UTC) for j in
                [await backend.get(stale.id), await backend.get(fresh.id)] if j and j.lease_expires_at}
        assert left[stale.id] > timedelta(minutes=9) and left[fresh.id] <= timedelta(seconds=30)

    asyncio.run(main())


class _Broken:
    """A held job whose state cannot be read, once: a bug inside the tending loop."""

    def __init__(self) -> None:
        self.reads = 0
        self.reported = None
        self.lease = timedelta(minutes=1)
        self.extended_at = 1e18  # never due for an extension

    @property
    def state(self) -> str:
        self.reads += 1
        if self.reads == 1:
            raise RuntimeError("a bug while tending")
        return "waiting"


def test_a_tending_loop_that_fails_is_restarted() -> None:
    """Leases and timeouts depend on it: a failure restarts it (supervise.py), its state says so."""
    broken = _Broken()
    seen: list[str] = []

    async def main() -> None:
        tending = Tending({broken}, MemoryBackend(), tick=0.02)  # type: ignore[arg-type]
        tending.ensure_started()
        async with asyncio.timeout(10):
            while broken.reads < 3:
                seen.append(tending.status.state)
                await asyncio.sleep(0.01)
        assert tending.status.state == "running" and tending.status.restarts == 1
        tending.stop()

    asyncio.run(main())
    assert "restarting: RuntimeError: a bug while tending" in seen
