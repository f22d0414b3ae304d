"""The per-user API shows the durable step a job is running, through the real Drainer: a worker
serving a type open to end users names the step it starts in the job's progress (the throttled
progress write), and the owner reads it under RLS as PostgREST runs their request (SET ROLE +
request.jwt.claims); when the job ends, the row shows its last step, completed. A worker that
serves no [user_api] types writes nothing for a step's start."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from jobkit.config import RateLimitConfig, Settings, UserApiConfig
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary

USER = "jobkit_user"
ALICE, BOB = str(uuid.uuid4()), str(uuid.uuid4())
API = UserApiConfig(schema=USER, types=("export",), max_payload_bytes=200,
                    limit=RateLimitConfig(rate=0.001, burst=4))


@pytest.fixture
def url(db_url: str) -> str:
    deploy(Database(db_url), Settings(db_url=db_url, user_api=API), DeployOptions(schedules=False),
           echo=lambda _m: None)
    return db_url


def _as(s: Session, sub: str | None) -> None:
    """What PostgREST does per request (sub None: back to the session's own role)."""
    s.execute("reset role")
    if sub is None:
        s.execute("select set_config('request.jwt.claims', '', false)")
        return
    s.execute("select set_config('request.jwt.claims', %s, false)",
              (json.dumps({"role": "authenticated", "sub": sub}),))
    s.execute("select set_config('role', 'authenticated', false)")


def _enqueue(url: str, sub: str) -> Any:
    with Database(url).session() as s:
        _as(s, sub)
        return s.scalar(f"select {USER}.enqueue('export', '{{}}'::jsonb)")


def _rows(url: str, sub: str) -> list[dict[str, Any]]:
    with Database(url).session() as s:
        _as(s, sub)
        return s.all(f"select * from {USER}.jobs")


def _registry(gate: asyncio.Event, report: bool) -> Registry:
    jobs = Registry()

    @jobs.handler("export")
    async def export(payload: Any, ctx: Any) -> Any:
        await ctx.step("charge", lambda: {"ok": 1})
        if report:
            ctx.progress((1, 2), "charged")
        await ctx.step("ship", gate.wait)
        return {"shipped": True}

    return jobs


async def _drain(url: str, jobs: Registry, step_types: tuple[str, ...]) -> DrainSummary:
    backend = PostgresBackend(url)
    await backend.open()
    try:
        return await Drainer(jobs, backend, concurrency=2, step_types=step_types).drain(
            "export", budget=timedelta(seconds=30))
    finally:
        await backend.close()


async def _running_step(url: str, job: Any) -> dict[str, Any]:
    """The owner's row once it shows a running step (bounded: the progress write comes within a
    tending tick, half a second at most here)."""
    for _ in range(200):
        [row] = await asyncio.to_thread(_rows, url, ALICE)
        assert row["id"] == job
        if row["step_status"] == "running":
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"the owner's row never showed a running step: {row}")


def test_the_owner_sees_the_step_running_now_then_the_last(url: str) -> None:
    job = _enqueue(url, ALICE)

    async def main() -> tuple[dict[str, Any], DrainSummary]:
        gate = asyncio.Event()
        drain = asyncio.create_task(_drain(url, _registry(gate, report=True), ("export",)))
        try:
            row = await _running_step(url, job)
        finally:
            gate.set()
        return row, await drain

    row, summary = asyncio.run(main())
    assert summary.completed == 1
    assert (row["status"], row["step"], row["step_finished_at"]) == ("processing", "ship", None)
    assert row["step_started_at"] is not None
    assert row["progress"] == {"fraction": 0.5, "done": 1, "total": 2, "message": "charged"}
    assert _rows(url, BOB) == []
    [done] = _rows(url, ALICE)
    assert (done["status"], done["step"], done["step_status"]) == ("completed", "ship", "completed")
    assert done["step_started_at"] == row["step_started_at"] and done["step_finished_at"] is not None
    assert done["result"] == {"shipped": True} and "step" not in (done["progress"] or {})
    with Database(url).session() as s:  # jobkit's own row names the step started last
        assert s.scalar("select progress -> 'step' ->> 'name' from jobkit.jobs where id = %s", (job,)) == "ship"


def test_a_worker_without_user_types_writes_nothing_at_a_step_start(url: str) -> None:
    job = _enqueue(url, ALICE)

    async def main() -> DrainSummary:
        gate = asyncio.Event()
        gate.set()
        return await _drain(url, _registry(gate, report=False), ())

    assert asyncio.run(main()).completed == 1
    with Database(url).session() as s:
        assert s.scalar("select progress from jobkit.jobs where id = %s", (job,)) is None
    [done] = _rows(url, ALICE)
    assert (done["step"], done["step_status"], done["progress"]) == ("ship", "completed", None)
