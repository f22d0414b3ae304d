"""Faults inside handlers and in what they hand back: every kind of exception ends only its own
attempt (the worker goes on, no job stays processing), and a result or an error the database cannot
store fails or shortens only its own job's record, with the cause named truthfully."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from faultkit import enqueue, exactly_once, prepare
from jobkit.connector import Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from poll import wait_for
from workers import Worker

CRASHERS: dict[str, Callable[[], BaseException]] = {
    "system_exit": lambda: SystemExit(3),
    "keyboard_interrupt": lambda: KeyboardInterrupt(),
    "generator_exit": lambda: GeneratorExit(),
    "cancelled": lambda: asyncio.CancelledError("the handler's own"),
    "value_error": lambda: ValueError("plain"),
}


def _crashers() -> Registry:
    jobs = Registry()
    for name, make in CRASHERS.items():
        async def raise_async(payload: Any, ctx: Any, make: Callable[[], BaseException] = make) -> None:
            raise make()

        def raise_sync(payload: Any, ctx: Any, make: Callable[[], BaseException] = make) -> None:
            raise make()

        jobs.handler(f"async.{name}", max_attempts=2)(raise_async)
        if name != "cancelled":
            jobs.handler(f"sync.{name}", max_attempts=2)(raise_sync)

    @jobs.handler("fine")
    async def fine(payload: Any, ctx: Any) -> str:
        return "ok"

    return jobs


def _drain_all(db_url: str, jobs: Registry, types: list[str], session: Session, rounds: int = 2,
               budget: timedelta = timedelta(seconds=5)) -> None:
    """Drain every type, make retries due, drain again."""
    async def main() -> None:
        backend = PostgresBackend(db_url)
        await backend.open()
        drainer = Drainer(jobs, backend, concurrency=4)
        try:
            for _ in range(rounds):
                for job_type in types:
                    await drainer.drain(job_type, budget=budget)
                await asyncio.to_thread(session.execute, "update jobkit.jobs set scheduled_for = now() "
                                                         "where status = 'pending'")
            assert not drainer.stopping
        finally:
            await drainer.shutdown()
            await backend.close()

    asyncio.run(main())


def test_every_kind_of_exception_ends_only_its_attempt(db_url: str, session: Session) -> None:
    jobs = _crashers()
    types = [t for t in jobs.types if t != "fine"]
    manager = Lifecycle(session, "jobkit")
    ids = {t: manager.enqueue(NewJob(t, {})) for t in types}
    fine = manager.enqueue_many([NewJob("fine", {}) for _ in range(10)])
    _drain_all(db_url, jobs, [*types, "fine"], session)
    rows = {r["type"]: r for r in session.all("select type, status, attempts, last_error from jobkit.jobs")}
    for job_type, job_id in ids.items():
        row = rows[job_type]
        kind = type(CRASHERS[job_type.split(".", 1)[1]]()).__name__
        assert (row["status"], row["attempts"]) == ("failed", 2), (job_type, row)
        assert kind in row["last_error"], (job_type, row["last_error"])
        history = [h.outcome for h in manager.history(job_id)]
        assert history == ["retry", "failed"], (job_type, history)
    assert all(manager.get(i).status == "completed" for i in fine)  # type: ignore[union-attr]
    assert session.scalar("select count(*) from jobkit.jobs where status = 'processing'") == 0


def test_a_worker_process_survives_system_exit_in_a_handler(
    fault_url: str, workers: Callable[..., Worker]
) -> None:
    url = fault_url
    prepare(url)
    worker = workers(url, "--listen")
    [job] = enqueue(url, 1, "fault.sysexit")
    others = enqueue(url, 5, seconds=0.01)
    wait_for(lambda: all(_status(url, i) == "completed" for i in others), 20, "the other jobs")
    wait_for(lambda: _status(url, job) == "failed", 20, "the SystemExit attempt recorded")
    assert worker.alive and worker.healthy()
    exactly_once(url, others).report("SystemExit in a handler")


RESULTS: dict[str, Any] = {
    "nan": float("nan"),
    "nul": "a\x00b",
    "surrogate": "x\ud800y",
    "nested_nul": {"deep": ["ok", "\x00"]},
}


@pytest.mark.parametrize("bad", sorted(RESULTS))
def test_one_unstorable_result_fails_only_its_job(db_url: str, session: Session, bad: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    runs: list[UUID] = []
    jobs = Registry()

    @jobs.handler("mixed")
    async def mixed(payload: dict[str, str], ctx: Any) -> Any:
        runs.append(ctx.id)
        return RESULTS.get(payload["kind"], payload["kind"])

    kinds = ["ok"] * 30 + [bad] + ["ok"] * 30
    Lifecycle(session, "jobkit").enqueue_many([NewJob("mixed", {"kind": k}) for k in kinds])
    with caplog.at_level(logging.WARNING, logger="jobkit.worker"):
        _drain_all(db_url, jobs, ["mixed"], session, rounds=1)
    rows = session.all("select payload->>'kind' as kind, status, result, last_error from jobkit.jobs")
    assert sorted((r["kind"], r["status"]) for r in rows if r["kind"] != "ok") == [(bad, "failed")]
    assert all(r["status"] == "completed" and r["result"] == "ok" for r in rows if r["kind"] == "ok")
    [error] = [r["last_error"] for r in rows if r["kind"] == bad]
    assert "not JSON-serializable" in error or "cannot be stored" in error
    assert len(runs) == len(set(runs)) == len(kinds)  # nothing ran twice
    assert "lost the database connection" not in caplog.text + error


def test_errors_the_database_refuses_are_stored_plainly(db_url: str, session: Session) -> None:
    """NUL and lone surrogates in failure messages, failing at the same moment as plain failures:
    every failure is recorded (the unstorable characters escaped), none is lost."""
    messages = {"plain": "plain failure", "nul": "with \x00 a NUL", "surrogate": "a lone \udc80 surrogate"}
    jobs = Registry()

    @jobs.handler("boom")
    async def boom(payload: dict[str, str], ctx: Any) -> None:
        raise RuntimeError(messages[payload["kind"]])

    kinds = sorted(messages) * 6
    Lifecycle(session, "jobkit").enqueue_many([NewJob("boom", {"kind": k}) for k in kinds])
    _drain_all(db_url, jobs, ["boom"], session, rounds=1)
    rows = session.all("select payload ->> 'kind' as kind, status, last_error from jobkit.jobs")
    assert len(rows) == len(kinds) and all(r["status"] == "pending" for r in rows)  # retries scheduled
    errors = {r["kind"]: r["last_error"] for r in rows}
    assert "RuntimeError: with \\x00 a NUL" in errors["nul"]
    assert "RuntimeError: a lone \\udc80 surrogate" in errors["surrogate"]
    assert "RuntimeError: plain failure" in errors["plain"]
    assert session.scalar("select count(*) from jobkit.job_attempts where outcome = 'retry'") == len(kinds)


def test_results_larger_than_one_statement_can_carry(db_url: str, session: Session) -> None:
    """30 results of 10 MB (300 MB, past jsonb's 255 MB per value) complete in several
    statements: every job completes once, none runs twice."""
    runs: list[UUID] = []
    jobs = Registry()
    big = "x" * (10 * 1024 * 1024)

    @jobs.handler("big", timeout=120)
    async def make_big(payload: Any, ctx: Any) -> dict[str, str]:
        runs.append(ctx.id)
        return {"blob": big}

    Lifecycle(session, "jobkit").enqueue_many([NewJob("big", {}) for _ in range(30)])
    # 300 MB through the database takes seconds on a busy machine: a drain's budget of 5 s left
    # jobs for a next drain that this test does not run (12 of 30 done once, under load).
    _drain_all(db_url, jobs, ["big"], session, rounds=1, budget=timedelta(minutes=2))
    assert session.scalar("select count(*) from jobkit.jobs where status = 'completed' "
                          "and length(result ->> 'blob') = %s", (len(big),)) == 30
    assert len(runs) == len(set(runs)) == 30


def _status(url: str, job_id: UUID) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("select status from jobkit.jobs where id = %s", (job_id,)).fetchone()
        return str(row[0]) if row else "gone"
