"""Real worker processes (`jobkit worker serve`): woken by the database through the pg_net stand-in
and through NOTIFY; kill -9 mid-batch; SIGTERM mid-drain; two processes under one rate limit."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from jobkit.config import RateLimitConfig, Settings, TypeConfig
from jobkit.connector import Database, Session
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.secrets import set_secrets
from jobkit.worker.signing import signed_headers
from poll import wait_for
from standins import PgNetStandIn
from workers import SECRET, Worker


@pytest.fixture
def tables(session: Session) -> Session:
    session.execute("create table side_effects (key text primary key, job_id uuid, at timestamptz default now())")
    session.execute("create table starts (job_id uuid, at timestamptz)")
    session.execute("grant all on side_effects, starts to public")
    return session


def _count(session: Session, where: str) -> int:
    return int(session.scalar(f"select count(*) from jobkit.jobs where {where}"))


def test_the_database_wakes_a_real_worker_through_pg_net(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    worker = workers()
    settings = Settings(db_url=db_url, maintenance={})
    PgNetStandIn(db_url).install()
    with PgNetStandIn(db_url):
        deploy(Database(db_url), settings, DeployOptions(), echo=lambda _m: None)
        set_secrets(Database(db_url), settings, url=worker.url + "/run", secret=SECRET)
        manager = Lifecycle(session, "jobkit")
        ok = manager.enqueue_many([NewJob("e2e.ok", {"i": i}) for i in range(20)])
        failing = manager.enqueue(NewJob("e2e.fail", {}))
        unknown = manager.enqueue(NewJob("e2e.nobody", {}, max_attempts=1))
        wait_for(lambda: _count(session, "type = 'e2e.ok' and status = 'completed'") == 20, 20, "ok jobs", every=0.1)
        assert manager.get(ok[3]).result == {"echo": {"i": 3}, "attempt": 1}  # type: ignore[union-attr]
        # The retry is due after 1 s: the worker's due-time timer runs it, no cron wake-up needed.
        wait_for(lambda: manager.get(failing).status == "failed", 10, "retry", every=0.1)  # type: ignore[union-attr]
        session.scalar("select jobkit.sweep_dead()")
        dead = manager.get(failing)
        assert dead is not None and dead.status == "dead" and dead.attempts == 2
        assert "upstream refused (attempt 2)" in (dead.last_error or "")
        assert [a.outcome for a in manager.history(failing)] == ["retry", "failed"]
        wait_for(lambda: manager.get(unknown).status in ("failed", "dead"), 10, "unknown type", every=0.1)  # type: ignore[union-attr]
        assert "no handler for job type 'e2e.nobody'" in (manager.get(unknown).last_error or "")  # type: ignore[union-attr]
        session.scalar("select jobkit.reconcile_wakeups()")
        outcomes = session.all("select outcome, count(*) as n from jobkit.wakeups group by 1")
        assert {r["outcome"] for r in outcomes} <= {"delivered", None}
    code, out = worker.stop()
    assert code == 0 and SECRET not in out


def test_the_notify_transport_with_a_listening_worker(
    db_url: str, session: Session, workers: Callable[..., Worker]
) -> None:
    manager = Lifecycle(session, "jobkit")
    early = manager.enqueue(NewJob("e2e.ok", {"early": True}))  # due before the worker starts
    worker = workers("--listen")
    later = manager.enqueue_many([NewJob("e2e.ok", {"i": i}) for i in range(5)])
    wait_for(lambda: _count(session, "status = 'completed'") == 6, 20, "listen mode drained nothing", every=0.1)
    assert manager.get(early).status == "completed" and len(later) == 5  # type: ignore[union-attr]
    code, out = worker.stop()
    assert code == 0 and SECRET not in out


def test_kill_9_mid_batch_loses_nothing_and_side_effects_happen_once(
    db_url: str, tables: Session, workers: Callable[..., Worker]
) -> None:
    session = tables
    manager = Lifecycle(session, "jobkit")
    deploy(Database(db_url), Settings(db_url=db_url, types={"e2e.slow": TypeConfig(
        backoff=Settings().defaults.backoff.__class__(base=_s(1), factor=1.0, cap=_s(1), jitter=0.0))}),
        DeployOptions(schedules=False), echo=lambda _m: None)
    ids = manager.enqueue_many([NewJob("e2e.slow", {"seconds": 30}, idempotency_key=f"charge-{i}")
                                for i in range(6)])
    victim = workers("--concurrency", "8")
    assert victim.run({"type": "e2e.slow"}).status_code == 202
    wait_for(lambda: session.scalar("select count(*) from side_effects") == 6, 15, "side effects", every=0.1)
    victim.proc.kill()  # kill -9 mid-batch: every job is processing, its side effect done
    victim.proc.communicate(timeout=10)
    assert _count(session, "status = 'processing'") == 6
    wait_for(lambda: _count(session, "lease_expires_at < now()") == 6, 15,  # lease = 5 s, no heartbeat
             "leases did not expire", every=0.1)
    assert len(manager.sweep_stuck()) == 6
    session.execute("update jobkit.jobs set scheduled_for = now(), payload = '{\"seconds\": 0.1}'")
    rescuer = workers()
    assert rescuer.run({"type": "e2e.slow"}).status_code == 202
    wait_for(lambda: _count(session, "status = 'completed'") == 6, 20, "rescued jobs did not complete", every=0.1)
    assert session.scalar("select count(*) from side_effects") == 6  # once each, not twice
    history = session.all("select outcome, count(*) as n from jobkit.job_history group by 1 order by 1")
    assert history == [{"outcome": "completed", "n": 6}, {"outcome": "lease_expired", "n": 6}]
    assert all(manager.get(i).attempts == 2 for i in ids)  # type: ignore[union-attr]


def test_sigterm_mid_drain_finishes_running_jobs_and_releases_the_rest(
    db_url: str, tables: Session, workers: Callable[..., Worker]
) -> None:
    session = tables
    manager = Lifecycle(session, "jobkit")
    manager.enqueue_many([NewJob("e2e.slow", {"seconds": 1.5}, idempotency_key=f"k{i}") for i in range(10)])
    worker = workers("--concurrency", "2", "--prefetch", "3", "--grace", "10s")
    assert worker.run({"type": "e2e.slow"}).status_code == 202
    wait_for(lambda: session.scalar("select count(*) from side_effects") == 2, 10, "nothing started", every=0.1)
    code, out = worker.stop(signal.SIGTERM)
    assert code == 0, out
    rows = session.all("select status, attempts, count(*) as n from jobkit.jobs group by 1, 2 order by 1")
    assert rows == [{"status": "completed", "attempts": 1, "n": 2}, {"status": "pending", "attempts": 0, "n": 8}]
    assert "released" in out and SECRET not in out


def test_two_processes_share_one_rate_limit(
    db_url: str, tables: Session, workers: Callable[..., Worker]
) -> None:
    session = tables
    deploy(Database(db_url), Settings(db_url=db_url, ratelimits={"e2e-api": RateLimitConfig(rate=10, burst=2)}),
           DeployOptions(schedules=False), echo=lambda _m: None)
    first, second = workers(), workers()
    for w in (first, second):  # a warm-up: each process has run a job (pool, imports) before the race
        Lifecycle(session, "jobkit").enqueue(NewJob("e2e.ok", {}))
        assert w.run({"type": "e2e.ok"}).status_code == 202
        wait_for(lambda: _count(session, "status = 'pending'") == 0, 20, "warm-up job did not run", every=0.05)
    Lifecycle(session, "jobkit").enqueue_many([NewJob("e2e.limited", {"i": i}) for i in range(50)])
    for w in (first, second):
        assert w.run({"type": "e2e.limited", "budget_ms": 20000}).status_code == 202
    wait_for(lambda: _count(session, "type = 'e2e.limited' and status = 'completed'") == 50, 30,
             "rate-limited jobs did not finish", every=0.1)
    starts = [float(r["t"]) for r in session.all("select extract(epoch from at) as t from starts order by at")]
    assert len(starts) == 50
    worst = max(sum(1 for s in starts if t <= s < t + 1.0) for t in starts)
    assert worst <= 10 + 2, worst
    assert starts[-1] - starts[0] >= 3.5  # 50 jobs at 10/s with a burst of 2 take about 4.8 s
    workers_used = session.scalar("select count(distinct worker_id) from jobkit.jobs where type = 'e2e.limited'")
    assert workers_used == 2


def test_worker_http_auth_and_secret_never_logged(db_url: str, workers: Callable[..., Worker]) -> None:
    worker = workers()
    assert worker.run({"type": "e2e.ok"}, secret=None).status_code == 401
    assert worker.run({"type": "e2e.ok"}, secret="not-the-secret-at-all-0123456789abcdef").status_code == 401
    assert worker.run({"type": "e2e.ok"}).status_code == 202
    bad = httpx.post(worker.url + "/run", content=b"{oops", timeout=10, headers=signed_headers(SECRET, b"{oops"))
    assert bad.status_code == 400
    code, out = worker.stop()
    assert code == 0 and SECRET not in out and "401" in out


def test_doctor_ping_round_trip_through_a_listening_worker(
    db_url: str, workers: Callable[..., Worker]
) -> None:
    from click.testing import CliRunner
    from jobkit.cli import cli

    deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(), echo=lambda _m: None)
    worker = workers("--listen")
    result = CliRunner().invoke(cli, ["doctor", "--ping", "--db-url", db_url])
    assert result.exit_code == 0, result.output
    assert "ping: round trip through the database: answered by" in result.output
    worker.stop()
    from jobkit.ops import doctor

    said: list[str] = []
    doctor.PING_PROGRESS = 0.5  # type: ignore[misc]  # progress lines every half second for this test
    try:
        [ping] = [c for c in doctor.run(Database(db_url), Settings(db_url=db_url), ping=True, ping_timeout=2,
                                        progress=said.append) if c.name == "ping"]
    finally:
        doctor.PING_PROGRESS = 5.0  # type: ignore[misc]
    assert ping.status == doctor.FAIL and "no answer within 2s (ping job pending, removed)" in ping.detail
    assert "NOTIFY: run the worker with `jobkit worker serve --listen`" in ping.fix  # this database's transport
    assert said and said[0].startswith("ping: waiting for the worker")
    with Database(db_url).session() as s:  # the unanswered ping job is gone
        assert s.scalar("select count(*) from jobkit.jobs where type = 'jobkit.ping' and status = 'pending'") == 0


def _s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)
