"""The Drainer against the real database: results, retries, signals, timeouts, heartbeats, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from jobkit.connector import Session
from jobkit.handlers import Permanent, RateLimited, Registry, Retry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary

T = TypeVar("T")


def _run(db_url: str, registry: Registry, body: Callable[[Drainer], Awaitable[T]], **options: Any) -> T:
    async def main() -> T:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await body(Drainer(registry, backend, **options))
        finally:
            await backend.close()

    return asyncio.run(main())


def _drain(db_url: str, registry: Registry, job_type: str, **options: Any) -> DrainSummary:
    return _run(db_url, registry, lambda d: d.drain(job_type), **options)


def test_drains_everything_and_stores_results(db_url: str, manager: Lifecycle, session: Session) -> None:
    jobs = Registry()

    @jobs.handler("square")
    async def square(payload: dict[str, int], ctx: Any) -> dict[str, int]:
        return {"n": payload["n"] ** 2, "attempt": ctx.attempt}

    manager.enqueue_many([NewJob("square", {"n": n}) for n in range(120)])
    summary = _drain(db_url, jobs, "square", concurrency=8, batch_size=20)
    assert (summary.claimed, summary.completed, summary.failed, summary.lost) == (120, 120, 0, 0)
    rows = session.all("select payload, result from jobkit.jobs where status = 'completed'")
    assert len(rows) == 120 and all(r["result"] == {"n": r["payload"]["n"] ** 2, "attempt": 1} for r in rows)


def test_sync_handlers_run_in_threads_and_heartbeat(db_url: str, manager: Lifecycle) -> None:
    jobs = Registry()
    seen: list[tuple[str, bool, str | None]] = []

    @jobs.handler("sync")
    def handle(payload: Any, ctx: Any) -> str:
        seen.append((threading.current_thread().name, ctx.heartbeat(), ctx.idempotency_key))
        return "ok"

    manager.enqueue(NewJob("sync", {}, idempotency_key="key-1"))
    assert _drain(db_url, jobs, "sync").completed == 1
    assert seen[0][0].startswith("jobkit-job") and seen[0][1:] == (True, "key-1")


def test_errors_retry_with_traceback_and_history(
    db_url: str, manager: Lifecycle, session: Session
) -> None:
    jobs = Registry()

    @jobs.handler("boom", max_attempts=5)
    def boom(payload: Any, ctx: Any) -> None:
        raise ValueError("smtp said no")

    job_id = manager.enqueue(NewJob("boom", {}))
    assert _drain(db_url, jobs, "boom").failed == 1
    job = manager.get(job_id)
    assert job is not None and job.status == "pending" and job.max_attempts is None
    assert job.handler_max_attempts == 5  # the handler's own, recorded by the claim
    assert "Traceback" in (job.last_error or "") and "ValueError: smtp said no" in (job.last_error or "")
    delay = session.scalar("select scheduled_for - now() from jobkit.jobs where id = %s", (job_id,))
    assert timedelta(seconds=25) < delay < timedelta(seconds=35)
    [attempt] = manager.history(job_id)
    assert attempt.outcome == "retry" and "smtp said no" in (attempt.error or "")


def test_retry_permanent_and_rate_limited(db_url: str, manager: Lifecycle, session: Session) -> None:
    jobs = Registry()

    @jobs.handler("retry")
    async def retry(payload: Any, ctx: Any) -> None:
        raise Retry("try later", after=300)

    @jobs.handler("permanent")
    async def permanent(payload: Any, ctx: Any) -> None:
        raise Permanent("bad address")

    @jobs.handler("limited")
    async def limited(payload: Any, ctx: Any) -> None:
        raise RateLimited("429", retry_after=120)

    ids = {t: manager.enqueue(NewJob(t, {}, max_attempts=5)) for t in ("retry", "permanent", "limited")}
    for job_type in ids:
        _drain(db_url, jobs, job_type)
    rows = {r["type"]: r for r in session.all(
        "select type, status, attempts, extract(epoch from scheduled_for - now()) as delay "
        "from jobkit.jobs")}
    assert rows["retry"]["status"] == "pending" and 290 < rows["retry"]["delay"] <= 300
    assert (rows["permanent"]["status"], rows["permanent"]["attempts"]) == ("failed", 1)
    assert (rows["limited"]["status"], rows["limited"]["attempts"]) == ("pending", 0)
    assert 110 < rows["limited"]["delay"] <= 120
    assert [a.outcome for a in manager.history(ids["limited"])] == ["snoozed"]


def test_unknown_type_fails_clearly_and_ends(db_url: str, manager: Lifecycle, session: Session) -> None:
    job_id = manager.enqueue(NewJob("nobody", {}, max_attempts=2))
    jobs = Registry()
    for _ in range(2):
        assert _drain(db_url, jobs, "nobody").failed == 1
        session.execute("update jobkit.jobs set scheduled_for = now() where id = %s", (job_id,))
    job = manager.get(job_id)
    assert job is not None and job.status == "failed"
    assert "no handler for job type 'nobody'" in (job.last_error or "")
    assert _drain(db_url, jobs, "nobody").claimed == 0


def test_non_json_result_is_an_error(db_url: str, manager: Lifecycle) -> None:
    jobs = Registry()

    @jobs.handler("weird")
    async def weird(payload: Any, ctx: Any) -> object:
        return object()

    job_id = manager.enqueue(NewJob("weird", {}))
    _drain(db_url, jobs, "weird")
    job = manager.get(job_id)
    assert job is not None and job.status == "failed" and "not JSON-serializable" in (job.last_error or "")


def test_a_result_the_database_refuses_fails_only_its_own_job(
    db_url: str, manager: Lifecycle, session: Session
) -> None:
    """NaN is not JSON; a NUL character is JSON that jsonb refuses. Either used to sink the whole
    completion batch; now only that job fails (permanently) and its batch-mates complete."""
    jobs = Registry()

    @jobs.handler("mixed")
    async def mixed(payload: dict[str, str], ctx: Any) -> Any:
        return {"nan": float("nan"), "nul": "a\x00b"}.get(payload["kind"], payload["kind"])

    kinds = ["ok"] * 10 + ["nan", "nul"] + ["ok"] * 10
    manager.enqueue_many([NewJob("mixed", {"kind": k}) for k in kinds])
    summary = _drain(db_url, jobs, "mixed", concurrency=4, batch_size=50)
    assert (summary.completed, summary.failed, summary.lost) == (20, 2, 0)
    rows = session.all("select payload->>'kind' as kind, status, result, last_error from jobkit.jobs")
    assert sorted((r["kind"], r["status"]) for r in rows if r["kind"] != "ok") == [
        ("nan", "failed"), ("nul", "failed")]
    assert all(r["status"] == "completed" and r["result"] == "ok" for r in rows if r["kind"] == "ok")
    errors = {r["kind"]: r["last_error"] for r in rows}
    assert "not JSON-serializable" in errors["nan"] and "cannot be stored" in errors["nul"]


def test_timeout_abandons_the_attempt(db_url: str, manager: Lifecycle) -> None:
    jobs = Registry()

    @jobs.handler("slow", timeout=0.3)
    async def slow(payload: Any, ctx: Any) -> None:
        await asyncio.sleep(5)

    job_id = manager.enqueue(NewJob("slow", {}))
    started = time.monotonic()
    assert _drain(db_url, jobs, "slow").failed == 1
    assert time.monotonic() - started < 3
    job = manager.get(job_id)
    assert job is not None and job.status == "pending" and "timed out after 0.3s" in (job.last_error or "")


def test_long_jobs_heartbeat_past_a_short_lease(db_url: str, manager: Lifecycle, session: Session) -> None:
    jobs = Registry()

    @jobs.handler("long", timeout=20, lease=5)
    async def long(payload: Any, ctx: Any) -> str:
        await asyncio.sleep(6.5)
        return "done"

    job_id = manager.enqueue(NewJob("long", {}))

    async def body(drainer: Drainer) -> DrainSummary:
        task = asyncio.create_task(drainer.drain("long"))
        swept = []
        while not task.done():  # sweep as pg_cron would, every 0.6 s, past the 5 s lease
            await asyncio.wait({task}, timeout=0.6)
            swept += await asyncio.to_thread(manager.sweep_stuck)
        assert swept == []
        return await task

    assert _run(db_url, jobs, body).completed == 1
    assert manager.get(job_id).status == "completed"  # type: ignore[union-attr]


def test_shutdown_lets_running_jobs_finish_and_releases_the_rest(
    db_url: str, manager: Lifecycle, session: Session
) -> None:
    jobs = Registry()
    started = asyncio.Event()

    @jobs.handler("work", timeout=30)
    async def work(payload: Any, ctx: Any) -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "finished"

    manager.enqueue_many([NewJob("work", {"i": i}) for i in range(6)])

    async def body(drainer: Drainer) -> tuple[DrainSummary, int]:
        task = asyncio.create_task(drainer.drain("work"))
        await started.wait()
        released = await drainer.shutdown(timedelta(seconds=5))
        return await task, released

    summary, released = _run(db_url, jobs, body, concurrency=2, prefetch=3)
    assert summary.completed == 2 and released == 4
    rows = session.all("select status, attempts, count(*) as n from jobkit.jobs group by 1, 2 order by 1")
    assert rows == [{"status": "completed", "attempts": 1, "n": 2}, {"status": "pending", "attempts": 0, "n": 4}]
