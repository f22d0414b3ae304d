"""How many claim loops a drain runs (Drainer ``claimers``): by default one next to the database,
for a plain and for a fair type alike, and a second one when the database is far away (its round
trip a large share of a claim's time); an explicit ``claimers`` is used as given. Every job still
runs exactly once; a trickle of jobs (no full claim) keeps one loop and sends no ping."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from jobkit.config import Settings, TypeConfig
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

JOBS = 2000
BATCH = 500  # claims of 500: next to the database a claim takes several times a ping's round trip
FAR = 0.05  # seconds each way added to a far database's claims and pings


class FarBackend(PostgresBackend):
    """The real database, with a long network between: each claim and ping waits FAR first."""

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(FAR)
        return await super().claim(*args, **kwargs)

    async def ping(self) -> None:
        await asyncio.sleep(FAR)
        await super().ping()


def _registry(job_type: str) -> Registry:
    jobs = Registry()

    @jobs.handler(job_type)
    async def run(_payload: Any, _ctx: Any) -> None:
        return None

    return jobs


def _drain(db_url: str, job_type: str, backend_class: type[PostgresBackend] = PostgresBackend,
           **options: Any) -> tuple[Drainer, Any]:
    async def main() -> tuple[Drainer, Any]:
        backend = backend_class(db_url)
        await backend.open()
        try:
            drainer = Drainer(_registry(job_type), backend, concurrency=8, batch_size=BATCH, prefetch=BATCH // 4,
                              **options)
            summary = await drainer.drain(job_type, budget=timedelta(seconds=120))
            await drainer.shutdown(grace=timedelta(0))
            return drainer, summary
        finally:
            await backend.close()

    return asyncio.run(main())


def _completed_once(session: Session, job_type: str) -> tuple[int, int]:
    row = session.one("select count(*) filter (where status = 'completed') as done, "
                      "count(*) filter (where attempts <> 1) as again from jobkit.jobs where type = %s",
                      (job_type,))
    return row["done"], row["again"]


def test_a_plain_drain_next_to_its_database_keeps_one_claim_loop(
        db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue_many([NewJob("plain", {"i": i}) for i in range(JOBS)])
    drainer, summary = _drain(db_url, "plain")
    assert (summary.completed, summary.ended) == (JOBS, "empty")
    assert drainer.claim_loops == {"plain": 1}
    assert drainer.round_trip is not None  # a full claim came back: the round trip was measured
    assert _completed_once(session, "plain") == (JOBS, 0)


def test_a_fair_drain_next_to_its_database_keeps_one_claim_loop(
        db_url: str, manager: Lifecycle, session: Session) -> None:
    deploy(Database(db_url), Settings(db_url=db_url, types={"fair": TypeConfig(fair=True)}),
           DeployOptions(schedules=False), echo=lambda _m: None)
    manager.enqueue_many([NewJob("fair", {"i": i}, concurrency_key=f"k{i % 50}") for i in range(JOBS)])
    drainer, summary = _drain(db_url, "fair")
    assert (summary.completed, summary.ended) == (JOBS, "empty")
    assert drainer.claim_loops == {"fair": 1}
    assert drainer.round_trip is not None  # a full claim came back: the round trip was measured
    assert _completed_once(session, "fair") == (JOBS, 0)


def test_a_far_database_gets_a_second_claim_loop(db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue_many([NewJob("far", {"i": i}) for i in range(JOBS)])
    drainer, summary = _drain(db_url, "far", FarBackend)
    assert (summary.completed, summary.ended) == (JOBS, "empty")
    assert drainer.claim_loops == {"far": 2}
    assert drainer.round_trip is not None and drainer.round_trip >= FAR
    assert _completed_once(session, "far") == (JOBS, 0)


@pytest.mark.parametrize(("claimers", "backend_class"), [(2, PostgresBackend), (1, FarBackend)])
def test_an_explicit_claimers_is_used_as_given(db_url: str, manager: Lifecycle, session: Session,
                                               claimers: int, backend_class: type[PostgresBackend]) -> None:
    manager.enqueue_many([NewJob("given", {"i": i}) for i in range(JOBS)])
    drainer, summary = _drain(db_url, "given", backend_class, claimers=claimers)
    assert summary.completed == JOBS
    assert drainer.claim_loops == {"given": claimers}
    assert drainer.round_trip is None  # nothing to decide: no ping sent
    assert _completed_once(session, "given") == (JOBS, 0)


def test_claimers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Drainer(Registry(), PostgresBackend("postgresql://unused"), claimers=0)


def test_a_trickle_keeps_one_claim_loop(db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue_many([NewJob("trickle", {"i": i}) for i in range(BATCH - 1)])  # no claim comes back full
    drainer, summary = _drain(db_url, "trickle", FarBackend)
    assert summary.completed == BATCH - 1
    assert drainer.claim_loops == {"trickle": 1}
    assert drainer.round_trip is None  # no full claim: nothing to decide, no ping sent
    assert _completed_once(session, "trickle") == (BATCH - 1, 0)
