"""Event races (issue 25's acceptance): 1,000 emit/wait pairs in random order, from 8 connections at
once. Every wait resumes exactly once with its own event (whether its emit came before it: the
latch, or after it: the emit's own transaction), nothing is left waiting, and waits whose event
never comes are resumed by the claim once their timeout has passed, none later."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
from jobkit.connector import Session
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle

PAIRS = 1000
LONELY = 100  # waits whose event never comes: their 1 s timeout resumes them
SUSPEND = ("select jobkit.suspend_job(%s, %s, 'event:race', 1, 'event', array['race'], array[%s], null, null, %s)")


def test_emits_and_waits_in_any_order_resume_every_wait_exactly_once(db_url: str, session: Session) -> None:
    life = Lifecycle(session)
    life.enqueue_many([NewJob("race", {}) for _ in range(PAIRS + LONELY)])
    claimed = life.claim("race", PAIRS + LONELY, "w", timedelta(minutes=5))
    assert len(claimed) == PAIRS + LONELY
    paired, lonely = claimed[:PAIRS], claimed[PAIRS:]
    ops = [("wait", c.id, c.attempts, str(i), timedelta(minutes=5)) for i, c in enumerate(paired)]
    ops += [("emit", None, None, str(i), None) for i in range(PAIRS)]
    ops += [("wait", c.id, c.attempts, f"none{i}", timedelta(seconds=1)) for i, c in enumerate(lonely)]
    random.Random(25).shuffle(ops)

    def run(chunk: list[tuple]) -> list[str | None]:
        out = []
        with psycopg.connect(db_url, autocommit=True) as conn:
            for kind, job_id, attempt, key, delay in chunk:
                if kind == "wait":
                    out.append(conn.execute(SUSPEND, (job_id, attempt, key, delay)).fetchone()[0])
                else:
                    conn.execute("select jobkit.emit('race', %s)", (key,))
        return out

    with ThreadPoolExecutor(8) as pool:
        statuses = [s for part in pool.map(run, [ops[i::8] for i in range(8)]) for s in part]
    assert None not in statuses  # every suspend held its job
    # Every paired wait resumed, once, with its own event; only the lonely ones still wait.
    rows = session.all("select s.job_id, s.result ->> 'key' as key, count(*) over (partition by s.job_id) as n "
                       "from jobkit.job_steps s where s.kind = 'wait'")
    keys = {r["job_id"]: r["key"] for r in rows}
    assert all(r["n"] == 1 for r in rows)
    assert {c.id: keys.get(c.id) for c in paired} == {c.id: str(i) for i, c in enumerate(paired)}
    assert session.scalar("select count(*) from jobkit.jobs where status = 'pending' and id = any(%s)",
                          ([c.id for c in paired],)) == PAIRS
    assert session.scalar("select count(*) from jobkit.job_waits") == sum(
        1 for c in lonely if c.id not in keys)
    # The lonely waits: their timeout passes and the claim of the type resumes them, none later.
    last = session.scalar("select extract(epoch from max(due) - now()) from jobkit.job_waits")
    time.sleep(max(0.0, float(last or 0)) + 0.05)  # just past the last timeout
    again = life.claim("race", PAIRS + LONELY, "w", timedelta(minutes=5))
    assert len(again) == PAIRS + LONELY
    assert session.scalar("select count(*) from jobkit.job_waits") == 0
    assert session.scalar("select count(*) from jobkit.job_steps where kind = 'wait' and result is null") == LONELY


def test_an_emit_from_a_transaction_older_than_the_job_reaches_its_later_wait(db_url: str, session: Session) -> None:
    """The emitting transaction began before the job was enqueued, and the job registers its wait
    after the emit committed: the wait still sees the event (latch), since the event's time is the
    emit's own, not its transaction's start."""
    life = Lifecycle(session)
    with psycopg.connect(db_url) as older:  # READ COMMITTED, as emit asks
        older.execute("select 1")  # its transaction has begun
        life.enqueue(NewJob("race", {}))
        older.execute("select jobkit.emit('race', 'old', '1')")
        older.commit()
    [job] = life.claim("race", 1, "w", timedelta(minutes=5))
    assert session.scalar(SUSPEND, (job.id, job.attempts, "old", timedelta(minutes=5))) == "pending"
    assert session.scalar("select result ->> 'data' from jobkit.job_steps where job_id = %s", (job.id,)) == "1"
