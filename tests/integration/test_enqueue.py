"""jobkit.enqueue / enqueue_many from Python: URLs, Database objects, the caller's own connection."""

from __future__ import annotations

from datetime import timedelta

import jobkit
import psycopg
import pytest
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError


def test_enqueue_by_url_and_database(db_url: str, session: Session) -> None:
    first = jobkit.enqueue(db_url, "mail", {"to": "a"}, priority=2, max_attempts=7, idempotency_key="k")
    same = jobkit.enqueue(Database(db_url), "mail", {"to": "b"}, idempotency_key="k")
    assert first == same
    row = session.one("select payload, priority, max_attempts from jobkit.jobs where id = %s", (first,))
    assert row == {"payload": {"to": "a"}, "priority": 2, "max_attempts": 7}


def test_delay_uses_the_database_clock(db_url: str, session: Session) -> None:
    job_id = jobkit.enqueue(db_url, "mail", {}, delay=timedelta(minutes=10))
    late = jobkit.enqueue(db_url, "mail", {}, delay=90)
    delays = {r["id"]: float(r["s"]) for r in session.all(
        "select id, extract(epoch from scheduled_for - created_at) as s from jobkit.jobs")}
    assert 599 < delays[job_id] <= 600 and 89 < delays[late] <= 90


def test_enqueue_in_the_callers_transaction(db_url: str, session: Session) -> None:
    with psycopg.connect(db_url) as conn:  # not autocommit: the job is part of this transaction
        jobkit.enqueue(conn, "mail", {"order": 1})
        assert session.scalar("select count(*) from jobkit.jobs") == 0  # not visible before commit
        conn.rollback()
    assert session.scalar("select count(*) from jobkit.jobs") == 0
    assert session.scalar("select count(*) from jobkit.wakeups") == 0  # nothing woken either
    with psycopg.connect(db_url) as conn:
        jobkit.enqueue(conn, "mail", {"order": 2})
    assert session.scalar("select count(*) from jobkit.jobs") == 1


def test_enqueue_many_keeps_order(db_url: str, session: Session) -> None:
    jobs = [jobkit.NewJob("t", {"i": i}, delay=timedelta(seconds=i)) for i in range(50)]
    ids = jobkit.enqueue_many(db_url, jobs)
    rows = {r["id"]: r["payload"]["i"] for r in session.all("select id, payload from jobkit.jobs")}
    assert [rows[i] for i in ids] == list(range(50))
    assert jobkit.enqueue_many(db_url, []) == []


def test_bad_target() -> None:
    with pytest.raises(ConfigError, match="cannot enqueue into a int"):
        jobkit.enqueue(42, "t", {})
