"""The Drainer over the in-memory backend: results, retries with backoff, permanent failures and rate
limits, without a database. The clock is the test's, so backoff is stepped over rather than waited."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from jobkit.config import Backoff, RateLimitConfig, TypeConfig
from jobkit.handlers import Permanent, RateLimited, Registry, Retry
from jobkit.jobs import NewJob, Status
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.drain import Drainer

T = TypeVar("T")


class Clock:
    """Wall time plus a shift the test moves forward."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


def _run(backend: MemoryBackend, registry: Registry, body: Callable[[Drainer], Awaitable[T]]) -> T:
    async def main() -> T:
        drainer = Drainer(registry, backend, concurrency=4, batch_size=10)
        try:
            return await body(drainer)
        finally:
            await drainer.shutdown(timedelta(seconds=1))

    return asyncio.run(main())


def test_drains_everything_and_stores_results() -> None:
    jobs, backend = Registry(), MemoryBackend()
    seen: list[tuple[str, int]] = []

    @jobs.handler("square")
    async def square(payload: dict[str, int], ctx: Any) -> int:
        seen.append((str(ctx.id), ctx.attempt))
        return payload["n"] ** 2

    ids = asyncio.run(backend.enqueue_many([NewJob("square", {"n": n}) for n in range(25)]))
    summary = _run(backend, jobs, lambda d: d.drain("square"))
    assert (summary.claimed, summary.completed, summary.failed, summary.lost) == (25, 25, 0, 0)
    assert sorted(seen) == sorted((str(i), 1) for i in ids)  # each job once, attempt 1
    assert [backend.rows[i].status for i in ids] == ["completed"] * 25
    assert [asyncio.run(backend.get(i)).result for i in ids] == [n**2 for n in range(25)]  # type: ignore[union-attr]


def test_a_failure_retries_after_backoff_with_the_next_attempt() -> None:
    clock = Clock()
    backend = MemoryBackend(clock=clock, defaults=TypeConfig(backoff=Backoff(base=timedelta(seconds=60), jitter=0)))
    jobs = Registry()
    attempts: list[int] = []

    @jobs.handler("flaky")
    def flaky(payload: Any, ctx: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return "ok"

    job_id = asyncio.run(backend.enqueue(NewJob("flaky", {})))
    assert _run(backend, jobs, lambda d: d.drain("flaky")).failed == 1
    row = backend.rows[job_id]
    assert row.status == "pending" and row.scheduled_for >= clock() + 59  # backoff, never at once
    assert "upstream down" in (row.last_error or "")
    assert _run(backend, jobs, lambda d: d.drain("flaky")).claimed == 0  # not due yet
    clock.shift += 61
    assert _run(backend, jobs, lambda d: d.drain("flaky")).completed == 1
    assert attempts == [1, 2] and backend.rows[job_id].status == "completed"
    assert [a.outcome for a in backend.history(job_id)] == ["retry", "completed"]


def test_permanent_and_exhausted_failures_end_failed() -> None:
    clock = Clock()
    backend = MemoryBackend(clock=clock, types={"twice": TypeConfig(max_attempts=2)})
    jobs = Registry()

    @jobs.handler("doomed")
    async def doomed(payload: Any, ctx: Any) -> None:
        raise Permanent("bad address")

    @jobs.handler("twice")
    async def twice(payload: Any, ctx: Any) -> None:
        raise ValueError("nope")

    bad = asyncio.run(backend.enqueue(NewJob("doomed", {})))
    _run(backend, jobs, lambda d: d.drain("doomed"))
    assert backend.rows[bad].status == "failed" and "bad address" in (backend.rows[bad].last_error or "")
    job_id = asyncio.run(backend.enqueue(NewJob("twice", {})))
    for _ in range(3):
        _run(backend, jobs, lambda d: d.drain("twice"))
        clock.shift += 3600
    assert backend.rows[job_id].status == "failed" and backend.rows[job_id].attempts == 2


def test_retry_and_rate_limited_exceptions_choose_the_delay() -> None:
    clock = Clock()
    backend = MemoryBackend(clock=clock)
    jobs = Registry()

    @jobs.handler("later")
    async def later(payload: Any, ctx: Any) -> None:
        raise Retry(after=timedelta(minutes=7)) if payload["kind"] == "retry" else RateLimited(retry_after=90)

    retry_id, limited_id = asyncio.run(
        backend.enqueue_many([NewJob("later", {"kind": "retry"}), NewJob("later", {"kind": "limited"})])
    )
    _run(backend, jobs, lambda d: d.drain("later"))
    assert 410 < backend.rows[retry_id].scheduled_for - clock() <= 420
    assert 80 < backend.rows[limited_id].scheduled_for - clock() <= 90
    assert backend.rows[retry_id].status == Status.PENDING and backend.rows[retry_id].attempts == 1
    assert backend.rows[limited_id].attempts == 0  # a rate limit does not use an attempt


def test_a_rate_limit_bounds_what_one_drain_claims() -> None:
    backend = MemoryBackend(ratelimits={"api": RateLimitConfig(rate=0.001, burst=5)})
    jobs = Registry()

    @jobs.handler("call", rate_limit="api")
    async def call(payload: Any, ctx: Any) -> None:
        return None

    asyncio.run(backend.enqueue_many([NewJob("call", i) for i in range(20)]))
    summary = _run(backend, jobs, lambda d: d.drain("call", budget=timedelta(seconds=2)))
    assert summary.completed == 5  # the burst; the next token is ~1000 s away, past the budget
    assert sum(r.status == "pending" for r in backend.rows.values()) == 15


def test_the_worker_logs_each_failure_and_each_job_it_gives_up_on(caplog: pytest.LogCaptureFixture) -> None:
    """WARNING per failed attempt (type, id, attempt, the exception's last line); ERROR when a job
    is out of attempts (it will be dead-lettered)."""
    backend = MemoryBackend(types={"twice": TypeConfig(max_attempts=2)}, clock=(clock := Clock()))
    jobs = Registry()

    @jobs.handler("twice")
    async def twice(payload: Any, ctx: Any) -> None:
        raise ValueError(f"bad input on attempt {ctx.attempt}")

    job_id = asyncio.run(backend.enqueue(NewJob("twice", {})))
    with caplog.at_level(logging.WARNING, logger="jobkit.worker"):
        _run(backend, jobs, lambda d: d.drain("twice"))
        clock.shift += 3600
        _run(backend, jobs, lambda d: d.drain("twice"))
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "jobkit.worker"]
    assert (("WARNING", f"job {job_id} (twice) attempt 1 failed, will retry: ValueError: bad input on attempt 1")
            in records)
    assert any(level == "ERROR" and f"job {job_id} (twice) failed for good after attempt 2" in text
               and "ValueError: bad input on attempt 2" in text for level, text in records)


@pytest.mark.parametrize("fails", [False, True], ids=["returns", "raises"])
def test_a_finished_job_leaves_no_reference_cycle(fails: bool) -> None:
    """A job's context and its Running referred to each other until the gc found them (issue 23:
    its traversals were a per-job cost of the drain); once the handler ends, refcounting frees them."""
    import gc

    from jobkit.worker.context import JobContext
    from jobkit.worker.recording import Running

    jobs, backend = Registry(), MemoryBackend()

    @jobs.handler("t", max_attempts=1)
    async def handler(payload: dict[str, int], ctx: Any) -> None:
        if fails:
            raise Permanent("no")

    asyncio.run(backend.enqueue_many([NewJob("t", {"n": n}) for n in range(5)]))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept in gc.garbage
    try:
        summary = _run(backend, jobs, lambda d: d.drain("t"))
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, JobContext | Running)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert summary.claimed == 5 and (summary.failed if fails else summary.completed) == 5
    assert cyclic == []
