"""The runner's clock (drain.py's _clock): a job's deadline is in its event loop's time, also on a
loop whose clock is not time.monotonic's (uvloop, a test's), where tending compares them."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.drain import Drainer


class ShiftedLoop(asyncio.SelectorEventLoop):
    """A loop whose clock runs 10,000 s ahead of time.monotonic."""

    def time(self) -> float:
        return super().time() + 10_000.0


def test_a_loop_with_its_own_clock_gives_deadlines_in_its_time() -> None:
    jobs, backend = Registry(), MemoryBackend()
    ticked: list[bool] = []

    @jobs.handler("slow", timeout=1)
    async def slow(_payload: Any, _ctx: Any) -> str:
        await asyncio.sleep(0.3)  # tending (a tick of 0.1 s at this timeout) looks at it meanwhile
        ticked.append(True)
        return "done"

    async def main() -> tuple[int, int]:
        [job_id] = await backend.enqueue_many([NewJob("slow", {})])
        drainer = Drainer(jobs, backend, concurrency=1)
        try:
            summary = await drainer.drain("slow")
        finally:
            await drainer.shutdown(timedelta(seconds=1))
        row = backend.rows[job_id]
        assert row.status == "completed", row.status  # not abandoned as past a deadline
        return summary.completed, summary.failed

    with asyncio.Runner(loop_factory=ShiftedLoop) as runner:
        assert runner.run(main()) == (1, 0)
    assert ticked == [True]
