"""Live workers (issue 27, 0021): real worker processes register and beat in the workers table, list
the jobs they hold, go stale when they stop beating and come back, are marked gone by their clean
shutdown or by the sweep after missed heartbeats, survive a database that does not answer their
heartbeat, and show in `jobkit status`, `jobkit doctor`, /metrics and the dashboard's /workers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from jobkit import __version__
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.dashboard.app import Dashboard
from jobkit.jobs import NewJob, WorkerInfo
from jobkit.lifecycle import Lifecycle
from jobkit.ops.doctor import WARN, run
from jobkit.ops.workers import read
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from poll import wait_for
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from workers import Worker

TOKEN = "scrape-token-0123456789"


def _row(session: Session, worker_id: str) -> dict[str, Any] | None:
    return session.one("select w.*, jobkit.worker_state(w.last_seen, w.heartbeat, w.gone_at) as state "
                       "from jobkit.workers w where w.id = %(id)s", {"id": worker_id})


def _info(worker_id: str, **changes: Any) -> WorkerInfo:
    base = {"id": worker_id, "host": "elsewhere", "pid": 4242, "version": "0.0.1", "transport": "notify",
            "concurrency": 4, "types": ("mail",), "heartbeat": timedelta(seconds=5),
            "started_at": datetime.now(UTC)}
    return WorkerInfo(**{**base, **changes})


def _beat(manager: Lifecycle, info: WorkerInfo, running: int = 0) -> None:
    manager.session.run(manager.sql.worker_beat(info, running))


def test_a_worker_process_registers_beats_lists_its_jobs_and_leaves_on_sigterm(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    worker = workers("--heartbeat", "1s", "--concurrency", "4", "--grace", "1s")
    worker_id = worker.health()["worker"]
    wait_for(lambda: _row(session, worker_id) is not None, 10, "the worker did not register")
    first = _row(session, worker_id)
    assert first is not None and first["state"] == "alive" and first["gone_at"] is None
    assert (first["pid"], first["version"], first["transport"], first["concurrency"]) == (
        worker.proc.pid, __version__, "pg_net", 4)
    assert "e2e.slow" in first["types"] and first["heartbeat"] == timedelta(seconds=1)
    wait_for(lambda: _row(session, worker_id)["last_seen"] > first["last_seen"], 10,  # type: ignore[index]
             "no second heartbeat")

    session.execute("create table side_effects (key text primary key, job_id uuid, at timestamptz default now())")
    session.execute("grant all on side_effects to public")
    manager = Lifecycle(session, "jobkit")
    ids = manager.enqueue_many([NewJob("e2e.slow", {"seconds": 30}, idempotency_key=f"w{i}") for i in range(3)])
    assert worker.run({"type": "e2e.slow"}).status_code == 202
    wait_for(lambda: session.scalar("select count(*) from side_effects") == 3, 15, "jobs did not start")
    [listed] = [w for w in read(session, "jobkit") if w.id == worker_id]
    assert {j.id for j in listed.jobs} == set(ids) and {j.type for j in listed.jobs} == {"e2e.slow"}
    wait_for(lambda: _row(session, worker_id)["running"] == 3, 10, "running count")  # type: ignore[index]

    status = json.loads(CliRunner().invoke(cli, ["status", "--json", "--db-url", db_url]).output)
    [shown] = [w for w in status["workers"] if w["id"] == worker_id]
    assert shown["state"] == "alive" and len(shown["jobs"]) == 3 and shown["host"] == first["host"]
    table = CliRunner().invoke(cli, ["status", "--db-url", db_url], env={"COLUMNS": "200"})
    assert "workers: 1 alive, 0 stale" in table.output and worker_id in table.output

    code, out = worker.stop(timeout=40)  # SIGTERM: its jobs get the grace, then it marks itself gone
    assert code == 0, out
    gone = _row(session, worker_id)
    assert gone is not None and gone["state"] == "gone" and gone["gone_reason"] == "stopped"
    assert gone["running"] == 0


def test_a_paused_worker_goes_stale_and_comes_back(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    worker = workers("--heartbeat", "1s", "--listen")
    worker_id = worker.health()["worker"]
    wait_for(lambda: _row(session, worker_id) is not None, 10, "the worker did not register")
    assert _row(session, worker_id)["transport"] == "notify"  # type: ignore[index]
    worker.pause()  # SIGSTOP: no heartbeat; stale after three missed ones (at least 10 s)
    try:
        wait_for(lambda: _row(session, worker_id)["state"] == "stale", 30, "not stale", every=0.5)  # type: ignore[index]
        doctor = {c.name: c for c in run(Database(db_url), Settings(db_url=db_url))}["workers"]
        assert doctor.status == WARN and worker_id in doctor.detail and "1 stale" in doctor.detail
    finally:
        worker.resume()
    wait_for(lambda: _row(session, worker_id)["state"] == "alive", 10, "not alive again")  # type: ignore[index]
    assert worker.healthy()


def test_a_killed_worker_is_marked_gone_by_the_sweep_and_deleted_an_hour_later(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    worker = workers("--heartbeat", "1s")
    worker_id = worker.health()["worker"]
    wait_for(lambda: _row(session, worker_id) is not None, 10, "the worker did not register")
    worker.kill()  # kill -9: no shutdown, no mark
    session.scalar("select count(*) from jobkit.sweep_stuck()")
    assert _row(session, worker_id)["state"] == "alive"  # type: ignore[index]  # not yet missed
    # The minutes pass: its last heartbeat is a minute old (three missed beats of 1 s, and 10 s).
    session.execute("update jobkit.workers set last_seen = now() - interval '1 minute' where id = %(id)s",
                    {"id": worker_id})
    assert _row(session, worker_id)["state"] == "stale"  # type: ignore[index]
    session.scalar("select count(*) from jobkit.sweep_stuck()")  # the built-in minute sweep
    swept = _row(session, worker_id)
    assert swept is not None and (swept["state"], swept["gone_reason"]) == ("gone", "missed heartbeats")
    doctor = {c.name: c for c in run(Database(db_url), Settings(db_url=db_url))}["workers"]
    assert doctor.status == WARN and "1 lost" in doctor.detail
    session.execute("update jobkit.workers set gone_at = now() - interval '61 minutes' where id = %(id)s",
                    {"id": worker_id})
    session.scalar("select count(*) from jobkit.sweep_stuck()")
    assert _row(session, worker_id) is None


def test_a_database_that_does_not_answer_heartbeats_does_not_stop_the_worker(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    """The workers table locked for five heartbeats: each beat times out, the worker keeps serving
    and beats again once the lock is gone."""
    worker = workers("--heartbeat", "1s")
    worker_id = worker.health()["worker"]
    wait_for(lambda: _row(session, worker_id) is not None, 10, "the worker did not register")
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with Database(db_url).session() as s, s.transaction():
            s.execute("lock table jobkit.workers in access exclusive mode")
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert locked.wait(10)
        wait_for(lambda: worker.health()["heartbeat"]["failing"] >= 3, 15, "heartbeats did not fail")
        assert worker.alive and worker.healthy()  # the worker serves on
        manager = Lifecycle(session, "jobkit")
        job = manager.enqueue(NewJob("e2e.ok", {"during": "outage"}))
        assert worker.run({"type": "e2e.ok"}).status_code == 202
        wait_for(lambda: manager.get(job).status == "completed", 10, "no job ran")  # type: ignore[union-attr]
    finally:
        release.set()
        holder.join()
    before = datetime.now(UTC)
    wait_for(lambda: _row(session, worker_id)["last_seen"] > before, 10, "no heartbeat after the lock")  # type: ignore[index]
    assert worker.alive
    code, out = worker.stop()
    assert code == 0 and "worker heartbeat failed" in out
    assert out.count("worker heartbeat failed") == 1  # logged once a minute, not once a beat
    assert "worker heartbeat written again after" in out


@pytest.fixture
def endpoint_client(db_url: str) -> Iterator[tuple[TestClient, WorkerEndpoint]]:
    options = EndpointOptions(secret="x" * 32, metrics_token=TOKEN, metrics_ttl=0.0,
                              heartbeat=timedelta(seconds=1))
    endpoint = WorkerEndpoint(_registry(), PostgresBackend(db_url), options)
    with TestClient(endpoint.app) as c:
        yield c, endpoint


def _registry() -> Any:
    import jobkit

    jobs = jobkit.Registry()

    @jobs.handler("mail")
    async def mail(payload: Any, ctx: Any) -> None:
        return None

    return jobs


def test_metrics_count_workers_by_state(endpoint_client: tuple[TestClient, WorkerEndpoint], session: Session) -> None:
    client, endpoint = endpoint_client
    assert endpoint.drainer is not None
    me = endpoint.drainer.worker_id
    wait_for(lambda: _row(session, me) is not None, 10, "the endpoint did not register")
    manager = Lifecycle(session, "jobkit")
    _beat(manager, _info("stale-one"))
    session.execute("update jobkit.workers set last_seen = now() - interval '1 minute' where id = 'stale-one'")
    _beat(manager, _info("gone-one"))
    manager.session.run(manager.sql.worker_gone("gone-one"))
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    samples = {s.labels.get("state"): s.value for family in text_string_to_metric_families(response.text)
               for s in family.samples if s.name == "jobkit_workers"}
    assert samples == {"alive": 1, "stale": 1, "gone": 1}


def test_the_endpoint_without_heartbeat_writes_nothing(db_url: str, session: Session) -> None:
    endpoint = WorkerEndpoint(_registry(), PostgresBackend(db_url), EndpointOptions(heartbeat=None))
    with TestClient(endpoint.app):
        assert endpoint.drainer is not None and endpoint.presence is None
    assert session.scalar("select count(*) from jobkit.workers") == 0


def test_the_dashboard_lists_workers_with_their_jobs(db_url: str, session: Session) -> None:
    manager = Lifecycle(session, "jobkit")
    _beat(manager, _info("host-a:0001"), running=2)
    _beat(manager, _info("host-b:0002"))
    manager.session.run(manager.sql.worker_gone("host-b:0002"))
    evil = "<script>alert(1)</script>"  # what a worker writes is data: escaped like a job's payload
    _beat(manager, _info(f"x{evil}", host=evil, version=evil, transport=evil, types=(evil,)))
    held = manager.enqueue_many([NewJob("mail", {"i": i}) for i in range(3)])
    manager.claim("mail", 2, "host-a:0001", timedelta(minutes=5))
    dashboard = Dashboard(db_url, Settings(db_url=db_url))
    try:
        with TestClient(dashboard.app, base_url="http://127.0.0.1") as client:
            page = client.get("/workers")
            fragment = client.get("/fragments/workers")
    finally:
        dashboard.close()
    assert page.status_code == 200 and fragment.status_code == 200
    claimed = {str(r["id"]) for r in session.all(
        "select id from jobkit.jobs where worker_id = 'host-a:0001' and status = 'processing'")}
    assert len(claimed) == 2 and all(i in page.text for i in claimed)
    unclaimed = [str(i) for i in held if str(i) not in claimed]
    assert not any(i in page.text for i in unclaimed)
    assert 'data-worker="host-a:0001" data-state="alive"' in page.text
    assert 'data-worker="host-b:0002" data-state="gone"' in page.text
    assert "2 alive" in fragment.text and "1 gone" in fragment.text
    assert evil not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


def test_worker_rows_are_checked(session: Session) -> None:
    manager = Lifecycle(session, "jobkit")
    with pytest.raises(Exception, match="workers_concurrency_check|violates check"):
        _beat(manager, _info("bad", concurrency=0))
    with pytest.raises(Exception, match="workers_id_check|violates check"):
        _beat(manager, _info(""))
    assert session.scalar("select count(*) from jobkit.workers") == 0


def test_heartbeat_option_is_checked(db_url: str) -> None:
    for bad, said in (("0s", "from 1s to 1m"), ("2m", "from 1s to 1m"), ("soon", "not a duration")):
        result = CliRunner().invoke(cli, ["worker", "serve", "e2e_handlers:jobs", "--heartbeat", bad,
                                          "--db-url", db_url])
        assert result.exit_code != 0 and said in result.output, result.output
        assert "Traceback" not in result.output
