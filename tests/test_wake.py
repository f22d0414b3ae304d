"""The database wakes the worker (migration 0002): over pg_net (the test stand-in) and over NOTIFY."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from jobkit.config import Settings, TypeConfig, WakeConfig
from jobkit.connector import Database, Session
from jobkit.deploy import DeployOptions, deploy
from jobkit.exceptions import DatabaseError
from jobkit.manager import JobManager, NewJob
from jobkit.secrets import set_secrets
from standins import PgNetStandIn, install_vault
from standins.http_server import Server

TOKEN = "test-token-0123456789abcdef"


def _redeploy(url: str, **settings: object) -> Settings:
    config = Settings(db_url=url, **settings)  # type: ignore[arg-type]
    deploy(Database(url), config, DeployOptions(schedules=False), echo=lambda _m: None)
    return config


@pytest.fixture
def net(db_url: str) -> Iterator[PgNetStandIn]:
    worker = PgNetStandIn(db_url)
    worker.install()
    with worker:
        yield worker


@pytest.fixture
def wired(db_url: str, net: PgNetStandIn, server: Server) -> Settings:
    """pg_net installed, deploy resolved transport auto -> pg_net, secrets point at the server."""
    settings = _redeploy(db_url, types={"bulk": TypeConfig(wake_on_insert=False)})
    set_secrets(Database(db_url), settings, url=server.base + "/ok", token=TOKEN)
    return settings


def _requests(session: Session) -> int:
    return int(session.scalar("select count(*) from jobkit.wakeups"))


def test_deploy_resolves_the_transport(db_url: str, session: Session) -> None:
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "notify"
    PgNetStandIn(db_url).install()
    _redeploy(db_url)
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "pg_net"
    _redeploy(db_url, wake=WakeConfig(transport="notify"))
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "notify"


def test_committed_enqueue_wakes_the_worker(wired: Settings, session: Session, server: Server) -> None:
    JobManager(session, "jobkit").enqueue(NewJob("email", {"to": "a"}))
    [seen] = server.wait_for(1)
    assert (seen.method, seen.path) == ("POST", "/ok")
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(seen.body) == {"type": "email", "max_jobs": 100, "budget_ms": 25000}
    _settle(session)
    row = session.one("select type, transport, outcome, status_code from jobkit.wakeups")
    assert row == {"type": "email", "transport": "pg_net", "outcome": "delivered", "status_code": 200}


def test_rolled_back_enqueue_wakes_nothing(wired: Settings, session: Session, server: Server) -> None:
    with pytest.raises(DatabaseError), session.transaction():
        JobManager(session, "jobkit").enqueue(NewJob("email", {}))
        session.execute("select 1 / 0")
    time.sleep(0.5)
    assert server.seen == [] and _requests(session) == 0
    assert session.scalar("select count(*) from net.http_request_queue") == 0


def test_ten_thousand_rows_wake_once_per_type(wired: Settings, session: Session, server: Server) -> None:
    manager = JobManager(session, "jobkit")
    manager.enqueue_many([NewJob(("a", "b")[i % 2], {"i": i}) for i in range(10_000)])
    seen = server.wait_for(2)
    time.sleep(0.5)
    assert sorted(json.loads(s.body)["type"] for s in server.seen) == ["a", "b"] and len(seen) == 2


def test_future_jobs_and_switched_off_types_do_not_wake(
    wired: Settings, session: Session, server: Server
) -> None:
    manager = JobManager(session, "jobkit")
    manager.enqueue(NewJob("email", {}, run_at=session.scalar("select now() + interval '1 hour'")))
    manager.enqueue(NewJob("bulk", {}))
    time.sleep(0.5)
    assert server.seen == [] and _requests(session) == 0


def test_wake_fans_out_with_the_backlog(wired: Settings, session: Session, server: Server) -> None:
    manager = JobManager(session, "jobkit")
    manager.enqueue_many([NewJob("bulk", {}) for _ in range(150)])
    assert session.scalar("select jobkit.wake('bulk')") == 2
    manager.enqueue_many([NewJob("bulk", {}) for _ in range(1000)])
    assert session.scalar("select jobkit.wake('bulk')") == 4  # capped by max_fanout
    assert session.scalar("select jobkit.wake('bulk', 1)") == 1
    assert len(server.wait_for(7)) == 7
    assert session.scalar("select jobkit.wake('nothing-here')") == 0
    assert _requests(session) == 7


def test_wake_all_wakes_every_type_with_due_work(wired: Settings, session: Session, server: Server) -> None:
    manager = JobManager(session, "jobkit")
    manager.enqueue_many([NewJob("bulk", {}), NewJob("bulk", {})])
    session.execute("alter table jobkit.jobs disable trigger jobs_wake_on_insert")
    manager.enqueue(NewJob("report", {}))
    manager.enqueue(NewJob("later", {}, run_at=session.scalar("select now() + interval '1 day'")))
    session.execute("alter table jobkit.jobs enable trigger jobs_wake_on_insert")
    assert session.scalar("select jobkit.wake_all()") == 2
    assert sorted(json.loads(s.body)["type"] for s in server.wait_for(2)) == ["bulk", "report"]


def test_reconcile_tells_outcomes_apart(
    wired: Settings, db_url: str, session: Session, server: Server
) -> None:
    """A 500 is a cron 'success' but a failed wake-up; a timeout may still have been delivered."""
    settings = wired
    session.execute("update jobkit.settings set value = '300' where key = 'wake_timeout_ms'")
    manager = JobManager(session, "jobkit")
    outcomes = {}
    for path, job_type in (("/fail", "t500"), ("/slow", "tslow"), ("/ok", "tok")):
        set_secrets(Database(db_url), settings, url=server.base + path, token=None)
        manager.enqueue(NewJob(job_type, {}))
    set_secrets(Database(db_url), settings, url="http://127.0.0.1:1/run", token=None)
    manager.enqueue(NewJob("trefused", {}))
    session.execute("insert into jobkit.wakeups (type, transport, request_id, created_at) "
                    "values ('tlost', 'pg_net', 999999, now() - interval '1 hour')")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        session.scalar("select jobkit.reconcile_wakeups()")
        rows = session.all("select type, outcome, status_code, error from jobkit.wakeups")
        outcomes = {r["type"]: r for r in rows}
        if all(r["outcome"] for r in rows):
            break
        time.sleep(0.1)
    assert outcomes["tok"]["outcome"] == "delivered"
    assert (outcomes["t500"]["outcome"], outcomes["t500"]["status_code"]) == ("failed", 500)
    assert outcomes["tslow"]["outcome"] == "timed_out"
    assert outcomes["trefused"]["outcome"] == "failed"
    assert "connect" in outcomes["trefused"]["error"].lower()
    assert outcomes["tlost"]["outcome"] == "unanswered"


def test_missing_secrets_never_break_an_enqueue(db_url: str, net: PgNetStandIn, session: Session) -> None:
    _redeploy(db_url)
    job_id = JobManager(session, "jobkit").enqueue(NewJob("email", {}))
    assert job_id is not None
    row = session.one("select outcome, error from jobkit.wakeups")
    assert row is not None and row["outcome"] == "failed" and "jobkit secrets set" in row["error"]


def test_vault_holds_the_secrets_when_installed(
    db_url: str, net: PgNetStandIn, server: Server, session: Session
) -> None:
    install_vault(db_url)
    settings = _redeploy(db_url)
    info, generated = set_secrets(Database(db_url), settings, url=server.base + "/ok", token=None)
    assert info.store == "vault" and generated and info.token_length > 30
    names = session.all("select name from vault.decrypted_secrets order by name")
    assert names == [{"name": "jobkit_worker_token"}, {"name": "jobkit_worker_url"}]
    assert session.scalar("select count(*) from jobkit.secrets") == 0
    JobManager(session, "jobkit").enqueue(NewJob("email", {}))
    [seen] = server.wait_for(1)
    token = session.scalar("select decrypted_secret from vault.decrypted_secrets "
                           "where name = 'jobkit_worker_token'")
    assert seen.headers["Authorization"] == f"Bearer {token}"
    rotated, _ = set_secrets(Database(db_url), settings, url=None, token=None, rotate=True)
    assert rotated.token_fingerprint != info.token_fingerprint
    assert session.scalar("select count(*) from vault.decrypted_secrets") == 2


def test_notify_transport_with_a_real_listen(db: Database, session: Session) -> None:
    with db.session() as listener:
        listener.listen("jobkit_wake")
        JobManager(session, "jobkit").enqueue(NewJob("email", {}))
        [(channel, payload)] = listener.notifies(timeout=5)
        assert channel == "jobkit_wake"
        assert json.loads(payload) == {"type": "email", "calls": 1, "max_jobs": 100}
        with pytest.raises(DatabaseError), session.transaction():
            JobManager(session, "jobkit").enqueue(NewJob("email", {}))
            session.execute("select 1 / 0")
        assert listener.notifies(timeout=0.5) == []
    assert session.scalar("select count(*) from jobkit.wakeups") == 0  # nothing to reconcile


def _settle(session: Session, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        session.scalar("select jobkit.reconcile_wakeups()")
        if not session.scalar("select count(*) from jobkit.wakeups where outcome is null"):
            return
        time.sleep(0.05)
    raise AssertionError("wake-ups not settled")


