"""Cancelling a running job: cancel_job tells its worker through the heartbeat path (one read a
second). A cooperative handler stops (ctx.cancelled; an async handler's task is cancelled), one
that ignores it is abandoned at its timeout; the attempt ends `cancelled` and no result is stored."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary

TIMEOUT = 3.0  # the ignoring handlers' timeout: they are abandoned then


def _registry(started: threading.Event, noticed: list[float]) -> Registry:
    jobs = Registry()

    @jobs.handler("coop.async", timeout=60)
    async def coop_async(_payload: Any, _ctx: Any) -> dict[str, bool]:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            noticed.append(time.monotonic())
            raise
        return {"late": True}

    @jobs.handler("coop.sync", timeout=60)
    def coop_sync(_payload: Any, ctx: Any) -> dict[str, bool]:
        started.set()
        deadline = time.monotonic() + 60
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        noticed.append(time.monotonic())
        return {"late": True}  # returned after the cancel: refused

    @jobs.handler("ignore.sync", timeout=TIMEOUT)
    def ignore_sync(_payload: Any, _ctx: Any) -> dict[str, bool]:
        started.set()
        time.sleep(TIMEOUT + 1)
        return {"late": True}

    @jobs.handler("ignore.async", timeout=TIMEOUT)
    async def ignore_async(_payload: Any, _ctx: Any) -> dict[str, bool]:
        started.set()
        end = time.monotonic() + TIMEOUT + 1
        while time.monotonic() < end:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                noticed.append(time.monotonic())  # and goes on regardless
        return {"late": True}

    return jobs


def _run_and_cancel(db_url: str, job_type: str) -> tuple[DrainSummary, Any, float | None, float]:
    started, noticed = threading.Event(), []
    with Database(db_url).session() as s:
        job_id = Lifecycle(s, "jobkit").enqueue(NewJob(job_type, {}))

    def cancel() -> float:
        assert started.wait(10), "the handler never started"
        with Database(db_url).session() as s:
            assert Lifecycle(s, "jobkit").cancel(job_id)
        return time.monotonic()

    async def main() -> tuple[DrainSummary, float]:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            drain = asyncio.create_task(
                Drainer(_registry(started, noticed), backend, concurrency=2).drain(
                    job_type, budget=timedelta(seconds=30)))
            cancelled_at = await asyncio.to_thread(cancel)
            return await drain, cancelled_at
        finally:
            await backend.close()

    began = time.monotonic()
    summary, cancelled_at = asyncio.run(main())
    return summary, job_id, (noticed[0] - cancelled_at) if noticed else None, time.monotonic() - began


@pytest.mark.parametrize("job_type", ["coop.async", "coop.sync"])
def test_a_cooperative_handler_stops(db_url: str, session: Session, job_type: str) -> None:
    summary, job_id, noticed_after, took = _run_and_cancel(db_url, job_type)
    print(f"[cancel] {job_type}: noticed {noticed_after:.2f}s after cancel_job; drain {took:.1f}s")
    assert noticed_after is not None and took < TIMEOUT * 4  # it stopped long before its 60 s
    _assert_cancelled(session, job_id, summary)


@pytest.mark.parametrize("job_type", ["ignore.sync", "ignore.async"])
def test_a_handler_that_ignores_it_is_abandoned_at_its_timeout(
    db_url: str, session: Session, job_type: str
) -> None:
    summary, job_id, _noticed, took = _run_and_cancel(db_url, job_type)
    print(f"[cancel] {job_type}: drain ended after {took:.1f}s (timeout {TIMEOUT:g}s)")
    _assert_cancelled(session, job_id, summary)


def _assert_cancelled(session: Session, job_id: Any, summary: DrainSummary) -> None:
    assert (summary.claimed, summary.cancelled, summary.completed, summary.failed) == (1, 1, 0, 0)
    row = session.one("select status, result, attempts from jobkit.jobs where id = %s", (job_id,))
    assert row == {"status": "cancelled", "result": None, "attempts": 1}
    history = session.all("select attempt, outcome from jobkit.job_history where job_id = %s", (job_id,))
    assert history == [{"attempt": 1, "outcome": "cancelled"}]


def test_cancelling_writes_one_attempt_row_for_a_running_attempt_and_none_for_an_ended_one(db_url: str) -> None:
    """A processing job's running attempt ends as 'cancelled'; a job that waits for its retry had
    its last attempt recorded when it failed: cancelling it adds no second row for that attempt."""
    from jobkit.jobs import Failure

    with Database(db_url).session() as s:
        life = Lifecycle(s)
        waiting, running = life.enqueue_many([NewJob("cancel.rows", {}), NewJob("cancel.rows", {})])
        claimed = {j.id: j for j in life.claim("cancel.rows", 2, "w", timedelta(seconds=30))}
        life.fail([Failure(waiting, claimed[waiting].attempts, "boom", retry_in=timedelta(hours=1))])
        assert life.cancel(waiting) and life.cancel(running)
        rows = s.all("select job_id, attempt, outcome from jobkit.job_attempts order by outcome")
    assert rows == [{"job_id": running, "attempt": 1, "outcome": "cancelled"},
                    {"job_id": waiting, "attempt": 1, "outcome": "retry"}]
