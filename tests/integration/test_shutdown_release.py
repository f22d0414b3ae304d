"""Drainer.shutdown hands a job back only when its handler can no longer be running, and records
the hand-back as 'released' (0009), which the dashboard's snooze figures do not count."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.queries import queries
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from prerecut import deploy_prerecut


def _blocking(release: threading.Event, started: threading.Event, runs: list[str]) -> Registry:
    jobs = Registry()

    @jobs.handler("blocking", timeout=60)
    def blocking(payload: Any, ctx: Any) -> str:
        runs.append(str(ctx.id))
        started.set()
        release.wait(30)
        return "finished"

    @jobs.handler("cooperative", timeout=60)
    async def cooperative(payload: Any, ctx: Any) -> None:
        runs.append(str(ctx.id))
        started.set()
        await asyncio.sleep(3600)

    return jobs


def _status(session: Session, job: Any) -> tuple[str, int]:
    row = session.one("select status, attempts from jobkit.jobs where id = %(id)s", {"id": job})
    return row["status"], row["attempts"]


def test_a_sync_handler_still_running_after_the_grace_keeps_its_job(db_url: str, manager: Lifecycle,
                                                                     session: Session) -> None:
    """Its thread cannot be stopped: the job is not released (nobody else may start it) and the
    thread's outcome is still recorded when it finishes."""
    release, started, runs = threading.Event(), threading.Event(), []
    jobs = _blocking(release, started, runs)
    job = manager.enqueue(NewJob("blocking", {}))
    waiting = manager.enqueue_many([NewJob("blocking", {}) for _ in range(2)])  # one slot: these wait

    async def main() -> tuple[int, int, tuple[str, int]]:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            drainer = Drainer(jobs, backend, concurrency=1, prefetch=3)
            drain = asyncio.ensure_future(drainer.drain("blocking"))
            await asyncio.to_thread(started.wait, 10)
            released = await drainer.shutdown(timedelta(seconds=0.2))
            held = _status(session, job)  # while the thread still runs
            abandoned = len(drainer.abandoned)
            release.set()
            summary = await asyncio.wait_for(drain, 10)
            assert summary.completed == 1 and summary.released == 2, summary
            return released, abandoned, held
        finally:
            await backend.close()

    released, abandoned, held = asyncio.run(main())
    assert (released, abandoned, held) == (2, 1, ("processing", 1))
    assert _status(session, job) == ("completed", 1) and runs == [str(job)]
    assert [_status(session, w) for w in waiting] == [("pending", 0)] * 2
    outcomes = session.all("select outcome, error from jobkit.job_attempts order by id")
    assert outcomes == [{"outcome": "released", "error": "released by a stopping worker"}] * 2
    assert session.all(queries("jobkit")["dash_snoozes"]) == []  # releases are not rate-limit snoozes
    [recent] = session.all(queries("jobkit")["dash_attempts_recent"])
    assert recent["snoozed_1h"] == 0


def test_at_exit_the_abandoned_jobs_are_released(db_url: str, manager: Lifecycle, session: Session) -> None:
    """`jobkit worker serve` releases them right before the process exits; an async handler is
    cancelled after the grace and its job released once it has ended."""
    release, started, runs = threading.Event(), threading.Event(), []
    jobs = _blocking(release, started, runs)
    job = manager.enqueue(NewJob("blocking", {}))
    calm = manager.enqueue(NewJob("cooperative", {}))

    async def main() -> tuple[int, int]:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            drainer = Drainer(jobs, backend, concurrency=2)
            drains = [asyncio.ensure_future(drainer.drain(t)) for t in ("blocking", "cooperative")]
            while len(runs) < 2:
                await asyncio.sleep(0.01)
            released = await drainer.shutdown(timedelta(seconds=0.2))
            assert [r.job.id for r in drainer.abandoned] == [job]
            at_exit = await drainer.release_abandoned()
            release.set()  # (the process would be gone by now)
            drainer.abandon()
            await asyncio.wait_for(asyncio.gather(*drains), 10)
            return released, at_exit
        finally:
            await backend.close()

    assert asyncio.run(main()) == (1, 1)
    assert _status(session, job) == ("pending", 0) and _status(session, calm) == ("pending", 0)
    outcomes = session.all("select outcome from jobkit.job_attempts")
    assert outcomes == [{"outcome": "released"}] * 2


def test_0009_relabels_past_releases_and_keeps_real_snoozes(fresh_db: str) -> None:
    """A database at 0008 holds releases recorded as 'snoozed'; deploying 0009 relabels exactly those."""
    settings = Settings(db_url=fresh_db)
    deploy_prerecut(fresh_db, through="0008")  # 0001..0008 as they were deployed, with their functions
    with Database(fresh_db).session() as s:
        released, snoozed = (s.scalar("select jobkit.enqueue('t', '{}')") for _ in range(2))
        s.execute("insert into jobkit.job_attempts (job_id, attempt, outcome, error) values "
                  "(%(r)s, 1, 'snoozed', 'released by a stopping worker'), (%(s)s, 1, 'snoozed', null)",
                  {"r": released, "s": snoozed})
    deploy(Database(fresh_db), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    with Database(fresh_db).session() as s:
        rows = s.all("select job_id, outcome from jobkit.job_attempts order by id")
        assert rows == [{"job_id": released, "outcome": "released"}, {"job_id": snoozed, "outcome": "snoozed"}]
        assert s.scalar("select convalidated from pg_catalog.pg_constraint "
                        "where conname = 'job_attempts_outcome_check'") is True
