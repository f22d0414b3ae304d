"""How many claim loops a drain runs (Drainer ``claimers``): two by default once its claims come
back full, for a plain and for a fair type alike; one for a trickle of jobs; an explicit
``claimers`` is used as given. Every job still runs exactly once."""

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
from jobkit.worker.drain import Drainer, DrainSummary

JOBS = 600
BATCH = 50


def _registry(job_type: str) -> Registry:
    jobs = Registry()

    @jobs.handler(job_type)
    async def run(_payload: Any, _ctx: Any) -> None:
        return None

    return jobs


def _drain(db_url: str, job_type: str, **options: Any) -> tuple[Drainer, DrainSummary]:
    async def main() -> tuple[Drainer, DrainSummary]:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            drainer = Drainer(_registry(job_type), backend, concurrency=8, batch_size=BATCH, **options)
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


def _fair(db_url: str, job_type: str) -> None:
    deploy(Database(db_url), Settings(db_url=db_url, types={job_type: TypeConfig(fair=True)}),
           DeployOptions(schedules=False), echo=lambda _m: None)


@pytest.mark.parametrize(("fair", "claimers", "loops"), [
    (False, None, 2), (True, None, 2), (False, 1, 1), (True, 1, 1), (False, 3, 3),
])
def test_a_backlog_gets_the_claim_loops_asked_for(db_url: str, manager: Lifecycle, session: Session,
                                                  fair: bool, claimers: int | None, loops: int) -> None:
    if fair:
        _fair(db_url, "t")
    manager.enqueue_many([NewJob("t", {"i": i}, concurrency_key=f"k{i % 20}" if fair else None)
                          for i in range(JOBS)])
    options = {} if claimers is None else {"claimers": claimers}
    drainer, summary = _drain(db_url, "t", **options)
    assert (summary.claimed, summary.completed, summary.ended) == (JOBS, JOBS, "empty")
    assert drainer.claim_loops == {"t": loops}
    assert _completed_once(session, "t") == (JOBS, 0)


def test_a_trickle_keeps_one_claim_loop(db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue_many([NewJob("t", {"i": i}) for i in range(BATCH - 1)])  # no claim comes back full
    drainer, summary = _drain(db_url, "t")
    assert summary.completed == BATCH - 1
    assert drainer.claim_loops == {"t": 1}
    assert _completed_once(session, "t") == (BATCH - 1, 0)


def test_claimers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Drainer(Registry(), PostgresBackend("postgresql://unused"), claimers=0)
