"""One rule for max_attempts: the job's value as enqueued, else the handler's, else the type's, else
the default (3). It holds for failures and for expired leases; retry_job gives a fresh full round."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from jobkit.config import Backoff, Settings, TypeConfig
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

NOW = Backoff(base=timedelta(seconds=1), factor=1.0, cap=timedelta(seconds=1), jitter=0.0)
seen: list[tuple[int, int]] = []  # (ctx.attempt, ctx.max_attempts) of every run


def _registry(handler_max: int | None) -> Registry:
    jobs = Registry()

    @jobs.handler("t", max_attempts=handler_max)
    async def fail(payload: Any, ctx: Any) -> None:
        seen.append((ctx.attempt, ctx.max_attempts))
        raise RuntimeError("no")

    return jobs


def _run_until_done(db_url: str, session: Session, jobs: Registry, job_id: UUID) -> str:
    """Drain, make the retry due, drain again, until the job stops being pending."""
    async def main() -> None:
        backend = PostgresBackend(db_url)
        await backend.open()
        drainer = Drainer(jobs, backend, concurrency=1)
        try:
            for _ in range(12):
                await drainer.drain("t", budget=timedelta(seconds=5))
                status = await asyncio.to_thread(
                    session.scalar, "select status from jobkit.jobs where id = %s", (job_id,))
                if status != "pending":
                    return
                await asyncio.to_thread(session.execute, "update jobkit.jobs set scheduled_for = now()")
        finally:
            await drainer.shutdown()
            await backend.close()

    asyncio.run(main())
    return str(session.scalar("select status from jobkit.jobs where id = %s", (job_id,)))


def _configure(db_url: str, type_max: int | None) -> None:
    types = {"t": TypeConfig(max_attempts=type_max, backoff=NOW)} if type_max else {}
    deploy(Database(db_url), Settings(db_url=db_url, types=types), DeployOptions(schedules=False),
           echo=lambda _m: None)


@pytest.mark.parametrize(("job_max", "handler_max", "type_max", "runs"), [
    (1, 5, 4, 1),        # the job's own value wins (enqueue --max-attempts 1 runs once)
    (4, 2, None, 4),     # ... also when it is larger than the handler's
    (None, 2, 5, 2),     # else the handler's
    (None, None, 4, 4),  # else the type's
    (None, None, None, 3),  # else the default
])
def test_the_first_value_set_decides(db_url: str, session: Session, job_max: int | None,
                                     handler_max: int | None, type_max: int | None, runs: int) -> None:
    _configure(db_url, type_max)
    job_id = Lifecycle(session, "jobkit").enqueue(NewJob("t", {}, max_attempts=job_max))
    seen.clear()
    assert _run_until_done(db_url, session, _registry(handler_max), job_id) == "failed"
    assert seen == [(n, runs) for n in range(1, runs + 1)]
    assert session.scalar("select attempts from jobkit.jobs") == runs


def test_expired_leases_follow_the_same_rule(db_url: str, session: Session, manager: Lifecycle) -> None:
    """The sweep knows the handler's value: the claim recorded it."""
    job_id = manager.enqueue(NewJob("t", {}))
    for attempt in (1, 2):
        rows = session.all("select * from jobkit.claim_jobs('t', 1, 'w', interval '1 minute', null, 2)")
        assert [(r["attempts"], r["max_attempts"]) for r in rows] == [(attempt, 2)]
        session.execute("update jobkit.jobs set lease_expires_at = now() - interval '1 second'")
        [swept] = session.all("select * from jobkit.sweep_stuck()")
        assert swept["status"] == ("pending" if attempt == 1 else "failed")
        session.execute("update jobkit.jobs set scheduled_for = now()")
    assert manager.get(job_id).status == "failed"  # type: ignore[union-attr]


def test_retry_job_gives_a_fresh_full_round(db_url: str, session: Session) -> None:
    _configure(db_url, None)
    jobs = _registry(2)
    job_id = Lifecycle(session, "jobkit").enqueue(NewJob("t", {}))
    seen.clear()
    assert _run_until_done(db_url, session, jobs, job_id) == "failed"
    assert Lifecycle(session, "jobkit").retry(job_id)
    assert _run_until_done(db_url, session, jobs, job_id) == "failed"
    assert seen == [(1, 2), (2, 2), (3, 4), (4, 4)]  # attempt numbers count on; never past the cap
    history = session.all("select attempt, outcome from jobkit.job_history where job_id = %s order by attempt",
                          (job_id,))
    assert [(h["attempt"], h["outcome"]) for h in history] == [
        (1, "retry"), (2, "failed"), (3, "retry"), (4, "failed")]
