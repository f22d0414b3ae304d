"""jobkit.enqueue / enqueue_many from Python: URLs, Database objects, the caller's own connection."""

from __future__ import annotations

import asyncio
import gc
import uuid
from datetime import timedelta

import jobkit
import psycopg
import pytest
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, ConnectionFailed
from jobkit.jobs import NewJob


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


def test_enqueue_on_the_callers_connection_leaves_nothing_behind_on_it(db_url: str) -> None:
    """Each call wraps the caller's connection in a Session; none may stay attached to it (a notice
    handler per call once kept every call's Session alive as long as the connection)."""
    def sessions() -> int:
        gc.collect()
        return sum(isinstance(o, Session) for o in gc.get_objects())

    with psycopg.connect(db_url, autocommit=True) as conn:
        jobkit.enqueue(conn, "mail", {})
        before = sessions()
        for i in range(20):
            jobkit.enqueue(conn, "mail", {"i": i})
            jobkit.enqueue_many(conn, [NewJob("mail", {"i": i})])
        assert sessions() == before


def test_enqueue_many_keeps_order(db_url: str, session: Session) -> None:
    jobs = [jobkit.NewJob("t", {"i": i}, delay=timedelta(seconds=i)) for i in range(50)]
    ids = jobkit.enqueue_many(db_url, jobs)
    rows = {r["id"]: r["payload"]["i"] for r in session.all("select id, payload from jobkit.jobs")}
    assert [rows[i] for i in ids] == list(range(50))
    assert jobkit.enqueue_many(db_url, []) == []


def test_enqueue_many_ids_are_random_version_4_uuids(db_url: str, session: Session) -> None:
    """The client draws a plain batch's ids (issue 23): gen_random_uuid()'s kind, each stored once."""
    ids = jobkit.enqueue_many(db_url, [NewJob("t", {"i": i}) for i in range(2000)])
    assert all(i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 2000
    assert session.scalar("select count(*) from jobkit.jobs where id = any(%s)", (ids,)) == 2000


def test_the_binary_id_array_reads_back_as_its_uuids(session: Session) -> None:
    """connector.uuid_array's bytes are what the server's array_recv takes, empty included, once
    Session.adapt has taught the connection the type."""
    from jobkit.connector import uuid_array
    from jobkit.lifecycle import new_ids

    raw = new_ids(3)
    session.adapt()
    assert session.scalar("select %s::uuid[]", (uuid_array(raw),)) == [
        uuid.UUID(bytes=raw[k:k + 16]) for k in (0, 16, 32)]
    assert session.scalar("select %s::uuid[]", (uuid_array(b""),)) == []


def test_bad_target() -> None:
    with pytest.raises(ConfigError, match="cannot enqueue into a int"):
        jobkit.enqueue(42, "t", {})


# ---- enqueue_async / enqueue_many_async ------------------------------------------------------------


def test_enqueue_async_by_url(db_url: str, session: Session) -> None:
    async def main() -> tuple[uuid.UUID, uuid.UUID, list[uuid.UUID]]:
        first = await jobkit.enqueue_async(db_url, "mail", {"to": "a"}, priority=3, idempotency_key="k",
                                           delay=timedelta(minutes=5))
        again = await jobkit.enqueue_async(db_url, "mail", {"to": "b"}, idempotency_key="k")
        many = await jobkit.enqueue_many_async(db_url, [NewJob("mail", {"n": n}) for n in range(50)])
        return first, again, many

    first, again, many = asyncio.run(main())
    assert first == again  # the key's unfinished job
    row = session.one("select payload, priority, scheduled_for > now() + interval '4 minutes' as later "
                      "from jobkit.jobs where id = %s", (first,))
    assert row == {"payload": {"to": "a"}, "priority": 3, "later": True}
    stored = {r["id"]: r["n"] for r in session.all(
        "select id, (payload->>'n')::int as n from jobkit.jobs where payload ? 'n'")}
    assert [stored[i] for i in many] == list(range(50))  # ids in input order


def test_enqueue_async_joins_the_callers_transaction(db_url: str, session: Session) -> None:
    async def main() -> tuple[uuid.UUID, list[uuid.UUID]]:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            kept = await jobkit.enqueue_async(conn, "mail", {"kept": True})
            await conn.commit()
            dropped = await jobkit.enqueue_many_async(conn, [NewJob("mail", {"dropped": True})] * 2)
            await conn.rollback()
            return kept, dropped

    kept, dropped = asyncio.run(main())
    ids = {r["id"] for r in session.all("select id from jobkit.jobs")}
    assert kept in ids and not ids & set(dropped)


def test_enqueue_async_refuses_what_it_cannot_use(db_url: str) -> None:
    with pytest.raises(ConfigError, match="cannot enqueue_async into a Database"):
        asyncio.run(jobkit.enqueue_async(Database(db_url), "mail", {}))  # type: ignore[arg-type]
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        asyncio.run(jobkit.enqueue_async("postgresql://nobody@127.0.0.1:1/x", "mail", {}))
