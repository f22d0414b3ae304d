"""Retries follow the configured per-type backoff curve, then the failure path (acceptance 3)."""

from __future__ import annotations

from datetime import timedelta

from jobkit.config import load_settings
from jobkit.connector import Database, Session
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import deploy

MIN = timedelta(minutes=1)


def test_failing_job_follows_the_configured_curve_then_dies(
    db: Database, db_url: str, session: Session, manager: Lifecycle, tmp_path
) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text(
        '[types.email]\nmax_attempts = 4\n'
        'backoff = { base = "10s", factor = 3, cap = "1m", jitter = 0.2 }\n'
    )
    deploy(db, load_settings(config, db_url=db_url), echo=lambda _m: None)
    job_id = manager.enqueue(NewJob("email", {"to": "x"}))
    for attempt, expected in ((1, 10), (2, 30), (3, 60)):  # 10 s, 30 s, 90 s capped at 60 s
        [job] = manager.claim("email", 1, "w", MIN)
        assert job.attempts == attempt
        assert manager.fail([Failure(job_id, attempt, f"smtp down #{attempt}")]) == {job_id: "pending"}
        delay = session.scalar(
            "select extract(epoch from scheduled_for - now()) from jobkit.jobs where id = %s", (job_id,))
        assert expected * 0.8 - 0.5 <= float(delay) <= expected * 1.2, (attempt, delay)
        assert manager.claim("email", 1, "w", MIN) == []
        session.execute("update jobkit.jobs set scheduled_for = now() where id = %s", (job_id,))
    [job] = manager.claim("email", 1, "w", MIN)
    assert manager.fail([Failure(job_id, 4, "smtp down #4")]) == {job_id: "failed"}
    assert manager.sweep_dead() == 1
    dead = manager.get(job_id)
    assert dead is not None and dead.status == "dead" and dead.last_error == "smtp down #4"
    history = [(h.attempt, h.outcome, h.error) for h in manager.history(job_id)]
    assert history == [
        (1, "retry", "smtp down #1"), (2, "retry", "smtp down #2"),
        (3, "retry", "smtp down #3"), (4, "failed", "smtp down #4"),
    ]


def test_default_curve_is_thirty_seconds_times_four(session: Session) -> None:
    rows = session.all(
        "select n, extract(epoch from jobkit.backoff('untyped', n)) as s from generate_series(1, 4) n")
    for row, expected in zip(rows, (30, 120, 480, 1920), strict=True):
        assert expected * 0.9 - 0.01 <= float(row["s"]) <= expected * 1.1 + 0.01


def test_backoff_is_capped_and_never_below_a_second(session: Session) -> None:
    session.execute("update jobkit.job_types set backoff_cap = '1 hour' where type = '*'")
    seconds = session.scalar("select max(extract(epoch from jobkit.backoff('t', 1000))) "
                             "from generate_series(1, 50)")
    assert float(seconds) <= 3600 * 1.1
    minimum = session.scalar("select min(extract(epoch from jobkit.backoff('t', 1))) "
                             "from generate_series(1, 200)")
    assert float(minimum) >= 27


def test_jitter_spreads_retries(session: Session) -> None:
    distinct = session.scalar("select count(distinct jobkit.backoff('t', 2)) from generate_series(1, 20)")
    assert distinct > 15
