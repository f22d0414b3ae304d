"""The database wakes the worker: over pg_net (the test stand-in) and over NOTIFY. One wake-up per
type per transaction (plus fan-out), due-time hints for delayed jobs and retry_job, signed
requests that carry no secret."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jobkit.config import Settings, TypeConfig, WakeConfig
from jobkit.connector import Database, Session
from jobkit.exceptions import DatabaseError
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.secrets import set_secrets
from jobkit.worker.signing import HEADER, Verifier
from poll import wait_for
from standins import PgNetStandIn, install_vault
from standins.http_server import Seen, Server


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
    set_secrets(Database(db_url), settings, url=server.base + "/ok")
    return settings


def _secret(session: Session) -> str:
    return str(session.scalar("select jobkit.secret('worker_secret')"))


def _requests(session: Session) -> int:
    return int(session.scalar("select count(*) from jobkit.wakeups"))


def _body(seen: Seen) -> dict[str, Any]:
    return dict(json.loads(seen.body))


def test_deploy_resolves_the_transport(db_url: str, session: Session) -> None:
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "notify"
    PgNetStandIn(db_url).install()
    _redeploy(db_url)
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "pg_net"
    _redeploy(db_url, wake=WakeConfig(transport="notify"))
    assert session.scalar("select value #>> '{}' from jobkit.settings where key = 'transport'") == "notify"


def test_a_committed_enqueue_sends_a_signed_wake_up(wired: Settings, session: Session, server: Server) -> None:
    Lifecycle(session, "jobkit").enqueue(NewJob("email", {"to": "a"}))
    [seen] = server.wait_for(1)
    assert (seen.method, seen.path) == ("POST", "/ok")
    body = _body(seen)
    assert body["type"] == "email" and body["budget_ms"] == 25000 and len(body["nonce"]) == 36
    assert set(body) == {"type", "budget_ms", "nonce"}
    assert "Authorization" not in seen.headers
    assert Verifier().check(seen.headers[HEADER], seen.body, [_secret(session)]).ok
    _settle(session)
    row = session.one("select type, transport, outcome, status_code from jobkit.wakeups")
    assert row == {"type": "email", "transport": "pg_net", "outcome": "delivered", "status_code": 200}


def test_the_queued_request_is_useless_after_the_window(wired: Settings, net: PgNetStandIn,
                                                        session: Session) -> None:
    """Every role can read net.http_request_queue: what it holds must not let anyone call the worker
    later. It holds no secret, and its signature expires."""
    net.stop()
    Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
    row = session.one("select headers, convert_from(body, 'UTF8') as body from net.http_request_queue")
    assert row is not None
    secret = _secret(session)
    assert secret not in json.dumps(row["headers"]) and secret not in row["body"]
    header, body = row["headers"][HEADER], row["body"].encode()
    t = int(header.split(",")[0].removeprefix("t="))
    assert Verifier().check(header, body, [secret], now=t + 1).ok  # as sent, within the window
    late = Verifier().check(header, body, [secret], now=t + 61)
    assert not late.ok and "window" in late.reason


def test_a_rolled_back_enqueue_wakes_nothing(wired: Settings, session: Session, net: PgNetStandIn) -> None:
    with pytest.raises(DatabaseError), session.transaction():
        Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
        session.execute("select 1 / 0")
    assert _requests(session) == 0
    assert session.scalar("select count(*) from net.http_request_queue") == 0


def test_many_enqueue_calls_in_one_transaction_wake_once_per_type_plus_fan_out(
    wired: Settings, session: Session
) -> None:
    """select enqueue(...) from generate_series: one statement per call, one wake-up (plus one per
    100 jobs up to max_fanout 4), not one per call."""
    session.execute("select jobkit.enqueue('email', '{}') from generate_series(1, 50)")
    assert _requests(session) == 1
    with session.transaction():
        session.execute("select jobkit.enqueue('sms', '{}') from generate_series(1, 500)")
        session.execute("select jobkit.enqueue('push', '{}') from generate_series(1, 3)")
        session.execute("select jobkit.enqueue('push', '{}')")
    counts = {r["type"]: r["n"] for r in session.all("select type, count(*) as n from jobkit.wakeups group by 1")}
    assert counts == {"email": 1, "sms": 4, "push": 1}


def test_a_single_enqueue_then_a_batch_in_one_transaction_fans_out(wired: Settings, session: Session) -> None:
    """The transaction's first record (one due job, written without the settings) is read back by
    the next statement: 1 + 150 due jobs want ceil(151 / 100) = 2 calls, so one more goes out."""
    manager = Lifecycle(session, "jobkit")
    with session.transaction():
        manager.enqueue(NewJob("email", {}))
        manager.enqueue_many([NewJob("email", {"i": i}) for i in range(150)])
    assert _requests(session) == 2


def test_an_enqueue_of_a_paused_type_does_not_count_as_a_sent_wake_up(
    wired: Settings, session: Session
) -> None:
    """Coalescing asks the cheap questions first, but a paused type's enqueue records nothing: the
    next enqueue after the pause ends, within the same second, still wakes the worker."""
    manager = Lifecycle(session, "jobkit")
    session.execute("select jobkit.pause_type('email')")
    manager.enqueue(NewJob("email", {}))
    assert _requests(session) == 0
    assert session.scalar("select count(*) from jobkit.wake_sent where type = 'email'") == 0
    session.execute("delete from jobkit.pauses where type = 'email'")  # no resume_type: it wakes
    manager.enqueue(NewJob("email", {}))
    assert _requests(session) == 1


def test_a_pause_lifted_inside_the_transaction_wakes_for_what_follows(
    wired: Settings, session: Session
) -> None:
    """The transaction's record keeps nothing for a paused type's enqueue, so a later statement of
    the same transaction, after the pause row is gone, sends the wake-up."""
    manager = Lifecycle(session, "jobkit")
    session.execute("select jobkit.pause_type('email')")
    with session.transaction():
        manager.enqueue(NewJob("email", {}))
        session.execute("delete from jobkit.pauses where type = 'email'")
        manager.enqueue(NewJob("email", {}))
    assert _requests(session) == 1


def test_ten_thousand_rows_in_one_statement(wired: Settings, session: Session, server: Server) -> None:
    manager = Lifecycle(session, "jobkit")
    manager.enqueue_many([NewJob(("a", "b")[i % 2], {"i": i}) for i in range(10_000)])
    counts = {r["type"]: r["n"] for r in session.all("select type, count(*) as n from jobkit.wakeups group by 1")}
    assert counts == {"a": 4, "b": 4}  # capped by max_fanout
    assert sorted({_body(s)["type"] for s in server.wait_for(8)}) == ["a", "b"]


def test_delayed_jobs_send_their_due_time(wired: Settings, session: Session, server: Server) -> None:
    manager = Lifecycle(session, "jobkit")
    with session.transaction():
        later = manager.enqueue(NewJob("email", {}, delay=_s(30)))
        sooner = manager.enqueue(NewJob("email", {}, delay=_s(5)))
        manager.enqueue(NewJob("email", {}, delay=_s(60)))
    [first, second] = [_body(s) for s in server.wait_for(2)]
    due = {r["id"]: r["t"] for r in session.all(
        "select id, extract(epoch from scheduled_for)::float8 as t from jobkit.jobs")}
    assert first["at"] == pytest.approx(due[later]) and second["at"] == pytest.approx(due[sooner])
    assert _requests(session) == 2  # the 60 s job is later than the 5 s one: no third wake-up
    manager.enqueue(NewJob("email", {}))  # due now: a plain wake-up, no due time
    assert "at" not in _body(server.wait_for(3)[2])


def test_a_batch_of_one_type_sends_its_earliest_due_time(wired: Settings, session: Session, server: Server) -> None:
    """One statement, one type, every job delayed: one wake-up carrying the soonest due time."""
    manager = Lifecycle(session, "jobkit")
    ids = manager.enqueue_many([NewJob("email", {}, delay=_s(d)) for d in (30, 5, 60)])
    [seen] = server.wait_for(1)
    due = session.scalar("select extract(epoch from scheduled_for)::float8 from jobkit.jobs where id = %s",
                         (ids[1],))
    assert _body(seen)["type"] == "email" and _body(seen)["at"] == pytest.approx(due)
    assert _requests(session) == 1


def test_future_jobs_far_ahead_and_switched_off_types(wired: Settings, session: Session) -> None:
    manager = Lifecycle(session, "jobkit")
    manager.enqueue(NewJob("bulk", {}))
    manager.enqueue(NewJob("bulk", {}, delay=_s(10)))
    assert _requests(session) == 0


def test_retry_job_wakes_the_worker(wired: Settings, session: Session, server: Server) -> None:
    manager = Lifecycle(session, "jobkit")
    session.execute("alter table jobkit.jobs disable trigger jobs_wake_on_insert")
    job_id = manager.enqueue(NewJob("email", {}, max_attempts=1))
    session.execute("alter table jobkit.jobs enable trigger jobs_wake_on_insert")
    [job] = manager.claim("email", 1, "w", _s(60))
    assert manager.fail([Failure(job_id, job.attempts, "boom")]) == {job_id: "failed"}
    assert _requests(session) == 0
    assert manager.retry(job_id)
    [seen] = server.wait_for(1)
    assert _body(seen)["type"] == "email" and "at" not in _body(seen)


def test_wake_fans_out_with_the_backlog(wired: Settings, session: Session, server: Server) -> None:
    manager = Lifecycle(session, "jobkit")
    manager.enqueue_many([NewJob("bulk", {}) for _ in range(150)])
    assert session.scalar("select jobkit.wake('bulk')") == 2
    manager.enqueue_many([NewJob("bulk", {}) for _ in range(1000)])
    assert session.scalar("select jobkit.wake('bulk')") == 4  # capped by max_fanout
    assert session.scalar("select jobkit.wake('bulk', 1)") == 1
    assert len(server.wait_for(7)) == 7
    assert session.scalar("select jobkit.wake('nothing-here')") == 0
    assert _requests(session) == 7


def test_wake_all_wakes_every_type_with_due_work(wired: Settings, session: Session, server: Server) -> None:
    manager = Lifecycle(session, "jobkit")
    manager.enqueue_many([NewJob("bulk", {}), NewJob("bulk", {})])
    session.execute("alter table jobkit.jobs disable trigger jobs_wake_on_insert")
    manager.enqueue(NewJob("report", {}))
    manager.enqueue(NewJob("later", {}, run_at=session.scalar("select now() + interval '1 day'")))
    session.execute("alter table jobkit.jobs enable trigger jobs_wake_on_insert")
    assert session.scalar("select jobkit.wake_all()") == 2
    assert sorted(_body(s)["type"] for s in server.wait_for(2)) == ["bulk", "report"]


def test_reconcile_tells_outcomes_apart(
    wired: Settings, db_url: str, session: Session, server: Server
) -> None:
    """A 500 is a cron 'success' but a failed wake-up; a timeout may still have been delivered."""
    settings = wired
    session.execute("update jobkit.settings set value = '300' where key = 'wake_timeout_ms'")
    manager = Lifecycle(session, "jobkit")
    outcomes = {}
    for path, job_type in (("/fail", "t500"), ("/slow", "tslow"), ("/ok", "tok")):
        set_secrets(Database(db_url), settings, url=server.base + path)
        manager.enqueue(NewJob(job_type, {}))
    set_secrets(Database(db_url), settings, url="http://127.0.0.1:1/run")
    manager.enqueue(NewJob("trefused", {}))
    session.execute("insert into jobkit.wakeups (type, transport, request_id, created_at) "
                    "values ('tlost', 'pg_net', 999999, now() - interval '1 hour')")
    deadline = time.monotonic() + 15
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
    job_id = Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
    assert job_id is not None
    row = session.one("select outcome, error from jobkit.wakeups")
    assert row is not None and row["outcome"] == "failed" and "jobkit secrets set" in row["error"]


def test_vault_holds_the_secrets_when_installed(
    db_url: str, net: PgNetStandIn, server: Server, session: Session
) -> None:
    install_vault(db_url)
    settings = _redeploy(db_url)
    info, generated = set_secrets(Database(db_url), settings, url=server.base + "/ok")
    assert info.store == "vault" and generated and info.length == 96
    names = session.all("select name from vault.decrypted_secrets order by name")
    assert names == [{"name": "jobkit_worker_secret"}, {"name": "jobkit_worker_url"}]
    assert session.scalar("select count(*) from jobkit.secrets") == 0
    Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
    [seen] = server.wait_for(1)
    secret = session.scalar("select decrypted_secret from vault.decrypted_secrets "
                            "where name = 'jobkit_worker_secret'")
    assert Verifier().check(seen.headers[HEADER], seen.body, [secret]).ok
    rotated, _ = set_secrets(Database(db_url), settings, url=None, rotate=True)
    assert rotated.fingerprint != info.fingerprint and rotated.previous_valid
    assert session.scalar("select count(*) from vault.decrypted_secrets") == 3


def test_notify_transport_with_a_real_listen(db: Database, session: Session) -> None:
    with db.session() as listener:
        listener.listen("jobkit_wake")
        with session.transaction():
            Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
            Lifecycle(session, "jobkit").enqueue(NewJob("email", {}, delay=_s(30)))
        [(channel, payload)] = listener.notifies(timeout=5)
        assert channel == "jobkit_wake"
        assert json.loads(payload) == {"type": "email", "calls": 1}
        Lifecycle(session, "jobkit").enqueue(NewJob("sms", {}, delay=_s(30)))
        [(_channel, delayed)] = listener.notifies(timeout=5)
        assert json.loads(delayed)["type"] == "sms" and json.loads(delayed)["at"] > time.time() + 20
        with pytest.raises(DatabaseError), session.transaction():
            Lifecycle(session, "jobkit").enqueue(NewJob("email", {}))
            session.execute("select 1 / 0")
        assert listener.notifies(timeout=0.2) == []
    assert session.scalar("select count(*) from jobkit.wakeups") == 0  # nothing to reconcile


def _s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


def _settle(session: Session, timeout: float = 5.0) -> None:
    def settled() -> bool:
        session.scalar("select jobkit.reconcile_wakeups()")
        return not session.scalar("select count(*) from jobkit.wakeups where outcome is null")

    wait_for(settled, timeout, "wake-ups settled")
