"""Debounce and throttle at enqueue, under 16 concurrent enqueuers (separate connections started
together). Debounce: one pending job per key, carrying the last committed payload, due the
debounce after the last enqueue; every caller gets its id. Throttle: one job per key per window;
every caller in the window gets the first one's id."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import jobkit
import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, DatabaseError
from jobkit.lifecycle import Lifecycle

ENQUEUERS, EACH = 16, 10


def _together(db_url: str, call: Callable[[Any, int], UUID]) -> list[UUID]:
    """Run ``call(connection session, n)`` EACH times in each of 16 threads released at once."""
    barrier = threading.Barrier(ENQUEUERS)
    ids: list[UUID] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        try:
            with Database(db_url).session() as s:
                barrier.wait(10)
                for i in range(EACH):
                    got = call(s, thread * EACH + i)
                    with lock:
                        ids.append(got)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(ENQUEUERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return ids


def test_debounce_keeps_one_pending_job_with_the_last_payload(db_url: str, session: Session) -> None:
    session.execute("create table served (n int primary key, seq bigint generated always as identity)")
    order: dict[int, int] = {}

    def call(s: Any, n: int) -> UUID:
        # The insert into served runs while the enqueue's transaction still holds the key's row
        # lock, so served.seq is the order in which the enqueues took effect.
        row = s.one("with e as materialized (select jobkit.enqueue('reindex', jsonb_build_object('n', %s::int),"
                    " p_concurrency_key => %s, p_debounce => '30 seconds') as id)"
                    " insert into served (n) select %s from e returning (select id from e), seq",
                    (n, f"k{n % 2}", n))
        order[n] = row["seq"]
        return UUID(str(row["id"]))

    ids = _together(db_url, call)
    rows = session.all("select id, concurrency_key, payload, scheduled_for - now() as due_in, status"
                       " from jobkit.jobs order by concurrency_key")
    assert [r["concurrency_key"] for r in rows] == ["k0", "k1"] and {r["status"] for r in rows} == {"pending"}
    assert set(ids) == {r["id"] for r in rows} and len(ids) == ENQUEUERS * EACH
    # Each key's job carries the payload of the key's last enqueue to take effect.
    last = {f"k{k}": max((n for n in order if n % 2 == k), key=order.__getitem__) for k in (0, 1)}
    assert [r["payload"] for r in rows] == [{"n": last["k0"]}, {"n": last["k1"]}]
    assert all(timedelta(seconds=29) < r["due_in"] <= timedelta(seconds=30) for r in rows)
    # Once the job runs, the next enqueue of the key starts a new pending job.
    claimed = Lifecycle(session, "jobkit").session.scalar(
        "select count(*) from jobkit.claim_jobs('reindex', 10, 'w', '1 minute')")
    session.execute("update jobkit.jobs set scheduled_for = now() where status = 'pending'")
    assert claimed == 0 and len(Lifecycle(session, "jobkit").claim("reindex", 10, "w", timedelta(minutes=1))) == 2
    again = jobkit.enqueue(session, "reindex", {"n": -1}, concurrency_key="k0", debounce="30s")
    assert again not in ids


def test_throttle_keeps_the_first_job_of_each_window(db_url: str, session: Session) -> None:
    def call(s: Any, n: int) -> UUID:
        return jobkit.enqueue(s, "digest", {"n": n}, concurrency_key=f"user:{n % 4}", throttle="1m")

    ids = _together(db_url, call)
    rows = session.all("select id, concurrency_key from jobkit.jobs order by concurrency_key")
    assert [r["concurrency_key"] for r in rows] == ["user:0", "user:1", "user:2", "user:3"]
    assert set(ids) == {r["id"] for r in rows} and len(ids) == ENQUEUERS * EACH
    # The window ends (moved into the past here): the next enqueue starts a new one.
    session.execute("update jobkit.enqueue_windows set until = now() - interval '1 second'")
    fresh = jobkit.enqueue(session, "digest", {}, concurrency_key="user:0", throttle="1m")
    assert fresh not in ids
    assert jobkit.enqueue(session, "digest", {}, concurrency_key="user:0", throttle="1m") == fresh


def test_debounce_and_throttle_refuse_what_they_cannot_do(db_url: str, session: Session) -> None:
    with pytest.raises(DatabaseError, match="need a concurrency key"):
        jobkit.enqueue(session, "plain", {}, debounce="5s")
    with pytest.raises(ConfigError, match="not both"):
        jobkit.enqueue(session, "plain", {}, concurrency_key="k", debounce="5s", throttle="5s")
    with pytest.raises(ConfigError, match="one job at a time"):
        jobkit.enqueue_many(session, [jobkit.NewJob("plain", {}, concurrency_key="k",
                                                    debounce=timedelta(seconds=5))])
    assert session.scalar("select count(*) from jobkit.jobs") == 0
    out = CliRunner().invoke(cli, ["enqueue", "plain", "--new-type", "--concurrency-key", "k", "--throttle",
                                   "1m", "--db-url", db_url])
    assert out.exit_code == 0, out.output
    again = CliRunner().invoke(cli, ["enqueue", "plain", "--concurrency-key", "k", "--throttle", "1m",
                                     "--db-url", db_url])
    assert again.output == out.output
