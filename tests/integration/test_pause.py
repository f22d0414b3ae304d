"""Pausing a job type or one key of it: claims stop at once (the first claim after the pause
commits finds nothing), nothing wakes the workers for it, and resuming wakes them again."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta
from typing import Any

import psycopg
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings, TypeConfig
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops import pauses
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

LEASE = timedelta(minutes=1)


def _notifications(db_url: str, action: Any) -> list[str]:
    """The wake-ups (NOTIFY payloads) sent while ``action()`` runs."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("listen jobkit_wake")
        action()
        return [n.payload for n in conn.notifies(timeout=0.5, stop_after=None)]


def test_pause_and_resume_a_type_and_a_key(db_url: str, manager: Lifecycle, settings: Settings) -> None:
    db = Database(db_url)
    deploy(db, Settings(db_url=db_url, types={"fair": TypeConfig(fair=True)}), DeployOptions(schedules=False),
           echo=lambda _m: None)
    assert pauses.pause(db, settings, "plain") and not pauses.pause(db, settings, "plain")
    sent = _notifications(db_url, lambda: manager.enqueue(NewJob("plain", {})))
    assert sent == []  # not woken for
    assert manager.claim("plain", 10, "w", LEASE) == []
    assert manager.session.scalar("select jobkit.wake_all()") == 0
    assert manager.session.scalar("select count(*) from jobkit.pending_types()") == 0
    sent = _notifications(db_url, lambda: pauses.resume(db, settings, "plain"))
    assert sent == ['{"type" : "plain", "calls" : 1}']  # resuming wakes the workers
    assert len(manager.claim("plain", 10, "w", LEASE)) == 1
    assert not pauses.resume(db, settings, "plain")
    # One key: the fair type's other keys go on; so does a plain type's job without a key.
    manager.enqueue_many([NewJob(t, {}, concurrency_key=k) for t in ("fair", "plain") for k in ("a", "b")])
    manager.enqueue(NewJob("plain", {}))
    pauses.pause(db, settings, "fair", "a")
    pauses.pause(db, settings, "plain", "a")
    assert [j.payload for j in manager.claim("fair", 10, "w", LEASE)] == [{}]
    assert len(manager.claim("plain", 10, "w", LEASE)) == 2  # key b and the job without a key
    assert [(p.type, p.key) for p in pauses.list_pauses(db, settings)] == [("fair", "a"), ("plain", "a")]
    pauses.resume(db, settings, "fair", "a")
    assert len(manager.claim("fair", 10, "w", LEASE)) == 1


def test_a_pause_stops_a_running_drain_within_one_claim(
    db_url: str, manager: Lifecycle, session: Session, settings: Settings
) -> None:
    db = Database(db_url)
    manager.enqueue_many([NewJob("slowish", {}) for _ in range(3000)])
    paused_at: list[datetime] = []
    done = threading.Event()
    jobs = Registry()
    count = 0

    @jobs.handler("slowish")
    async def run(_payload: Any, _ctx: Any) -> None:
        nonlocal count
        count += 1
        if count == 200:
            done.set()
        await asyncio.sleep(0.002)

    def pause_midway() -> None:
        done.wait(30)
        pauses.pause(db, settings, "slowish")
        with db.session() as s:  # a transaction that starts after the pause committed
            paused_at.append(s.scalar("select now()"))

    async def main() -> Any:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(jobs, backend, concurrency=4, batch_size=10).drain(
                "slowish", budget=timedelta(seconds=60))
        finally:
            await backend.close()

    thread = threading.Thread(target=pause_midway)
    thread.start()
    summary = asyncio.run(main())
    thread.join()
    assert summary.ended == "empty" and 200 <= summary.completed < 3000
    # No claim that started after the pause claimed anything (each claim's jobs carry its start).
    assert session.scalar("select count(*) from jobkit.jobs where started_at > %s", (paused_at[0],)) == 0
    assert session.scalar("select count(*) from jobkit.jobs where status = 'processing'") == 0
    runner = CliRunner()
    result = runner.invoke(cli, ["resume", "slowish", "--db-url", db_url])
    assert result.exit_code == 0 and result.output == "resumed slowish\n"
    assert runner.invoke(cli, ["resume", "slowish", "--db-url", db_url]).output == "slowish was not paused\n"
    assert len(manager.claim("slowish", 5000, "w", LEASE)) == 3000 - summary.completed


def test_status_jobs_list_and_doctor_show_keys_pauses_and_cancellations(
    db_url: str, manager: Lifecycle, settings: Settings
) -> None:
    db = Database(db_url)
    deploy(db, Settings(db_url=db_url, types={"report": TypeConfig(fair=True, max_running_per_key=2)}),
           DeployOptions(schedules=False), echo=lambda _m: None)
    manager.enqueue_many([NewJob("report", {}, concurrency_key=f"tenant:{k}") for k in (1, 1, 1, 2)])
    claimed = manager.claim("report", 10, "w", LEASE)
    assert manager.cancel(claimed[0].id)
    pauses.pause(db, settings, "report", "tenant:2")
    pauses.pause(db, settings, "idle")
    runner = CliRunner()
    status = json.loads(runner.invoke(cli, ["status", "--json", "--db-url", db_url]).output)
    report = {t["type"]: t for t in status["types"]}["report"]
    assert (report["fair"], report["max_running_per_key"], report["keys"], report["cancelled_1h"],
            report["paused_keys"], report["processing"]) == (True, 2, 2, 1, 1, 2)
    assert {t["type"]: t["paused"] for t in status["types"]}["idle"] is True
    assert {(k["key"], k["running"], k["runnable"]) for k in status["keys"]} == {("tenant:1", 1, 1),
                                                                                  ("tenant:2", 1, 0)}
    assert [(p["type"], p["key"]) for p in status["pauses"]] == [("idle", None), ("report", "tenant:2")]
    table = runner.invoke(cli, ["status", "--db-url", db_url], env={"COLUMNS": "250"}).output
    assert "report (1 keys paused)" in table and "idle (paused)" in table and "(2/key)" in table
    listed = json.loads(runner.invoke(cli, ["jobs", "list", "--json", "--key", "tenant:1", "--db-url",
                                            db_url]).output)
    assert [r["key"] for r in listed] == ["tenant:1"] * 3
    assert "tenant:1" in runner.invoke(cli, ["jobs", "list", "--db-url", db_url], env={"COLUMNS": "250"}).output
    checks = {c["name"]: c for c in json.loads(
        runner.invoke(cli, ["doctor", "--json", "--db-url", db_url]).stdout)}
    assert checks["concurrency"]["status"] == "warn"
    assert "paused: idle, report key tenant:2" in checks["concurrency"]["detail"]
    assert "report 2/key" in checks["concurrency"]["detail"] and "1 while running" in checks["concurrency"]["detail"]
    assert checks["concurrency"]["fix"] == "jobkit resume idle"
