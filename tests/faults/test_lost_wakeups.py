"""A lost wake-up is caught by the sweep (issue 25's acceptance). Three kinds of wait that nothing
but the sweep resumes, each lost for real, with real workers:

- sleepers whose timers died with their worker: the worker that ran them (its timers set by the
  wake-ups their suspensions sent) is killed with SIGKILL once they sleep, and a new one starts
  before their time comes, so its start-up catch-up finds nothing due; when the time comes, no
  worker is told;
- event waits that an emit could not see: the emits come from a REPEATABLE READ transaction whose
  snapshot predates the jobs, so the emit finds no wait to resolve (the events are stored);
- parents waiting (ctx.wait_for_jobs) for children that were deleted (delete_jobs, what `jobkit
  jobs delete` runs) instead of finishing.

The cron wake-up (wake_all) then runs a few times and every one of them still waits. One run of
sweep_stuck, as pg_cron runs it, resumes them all: each completes exactly once, having run
twice (before its wait and replayed after it). The unit-level case (the same three, staged by
hand) is tests/integration/test_waits.py::test_the_sweep_catches_a_lost_wake_up."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
from faultkit import Ticker, count, exactly_once, prepare
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from poll import wait_for
from workers import Worker

SLEEPERS, WAITERS, PARENTS = 40, 40, 10
SLEEP = 10.0  # seconds: the new worker has started and caught up by then (measured: 4 to 6 s after the enqueue)
ARGS = ("--concurrency", "8", "--listen")


def _enqueue(url: str) -> tuple[list[UUID], list[UUID], list[UUID]]:
    until = (datetime.now(UTC) + timedelta(seconds=SLEEP)).timestamp()
    late = [{"type": "fault.child", "payload": {}, "delay": 3600}] * 2  # pending until they are deleted
    with Database(url).session() as s:
        life = Lifecycle(s)
        sleepers = life.enqueue_many([NewJob("fault.sleeper", {"until": until}) for _ in range(SLEEPERS)])
        waiters = life.enqueue_many([NewJob("fault.waiter", {"key": f"rr{i}"}) for i in range(WAITERS)])
        parents = life.enqueue_many([NewJob("fault.parent", {"children": late}) for _ in range(PARENTS)])
    return sleepers, waiters, parents


def test_the_sweep_resumes_waits_whose_wake_up_was_lost(fault_url: str, workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    first = workers(url, *ARGS)
    total = SLEEPERS + WAITERS + PARENTS
    with psycopg.connect(url) as snapshot:
        snapshot.execute("set transaction isolation level repeatable read")
        snapshot.execute("select 1")  # its snapshot, taken before the jobs exist
        sleepers, waiters, parents = _enqueue(url)
        wait_for(lambda: count(url, "status = 'waiting'") == total, 60, "every job waiting")
        for i in range(WAITERS):
            snapshot.execute("select jobkit.emit('fault.go', %s, %s::jsonb)", (f"rr{i}", f'"rr{i}"'))
        snapshot.commit()
    first.kill()  # the sleepers' timers die with it
    workers(url, *ARGS)  # a new worker, whose start-up catch-up finds nothing due
    [marker] = _marker(url)
    wait_for(lambda: count(url, "id = %s and status = 'completed'", (marker,)) == 1, 30, "the new worker running")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(  # its catch-up ran before the marker's drain ended
            "select extract(epoch from (select min(due) from jobkit.job_waits) - j.completed_at)::float8"
            " from jobkit.jobs j where j.id = %s", (marker,)).fetchone()
        margin = float(row[0]) if row else 0.0
        assert margin > 0, "the new worker started after the sleepers' time had come"
        children = [r[0] for r in conn.execute("select id from jobkit.jobs where payload ? 'parent'").fetchall()]
        assert conn.execute("select jobkit.delete_jobs(%s)", (children,)).fetchone() == (2 * PARENTS,)
        assert conn.execute("select count(*) from jobkit.events where name = 'fault.go'").fetchone() == (WAITERS,)
        due = "select now() > max(due) from jobkit.job_waits where kind = 'sleep'"
        wait_for(lambda: conn.execute(due).fetchone() == (True,), SLEEP + 30, "the sleepers' time coming")
    with Ticker(url, period=0.3, sweep=False) as cron:  # the cron wake-up alone
        wait_for(lambda: cron.ticks >= 3, 30, "three cron wake-ups")
    assert count(url, "status = 'waiting'") == total  # lost: nothing told any worker
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select count(*) from jobkit.sweep_stuck()")  # pg_cron's sweep-stuck, once
    try:
        took = wait_for(lambda: count(url, "status = 'completed'") == total + 1, 30, "every job resuming")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {_left(url)}") from None
    _check(url, sleepers, waiters, parents, children)
    print(f"[faults] lost wake-ups: {SLEEPERS} sleepers whose worker died, {WAITERS} event waits an emit "
          f"could not see, {PARENTS} parents of deleted children: still waiting after 3 cron wake-ups, all "
          f"resumed by one sweep and completed exactly once, {took:.1f}s after it (the new worker was up "
          f"{margin:.1f}s before the sleepers' time)")


def _left(url: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("select type, status, count(*) from jobkit.jobs where status <> 'completed'"
                            " group by 1, 2 order by 1, 2").fetchall()


def _marker(url: str) -> list[UUID]:
    with Database(url).session() as s:
        return Lifecycle(s).enqueue_many([NewJob("fault.work", {"seconds": 0})])


def _check(url: str, sleepers: list[UUID], waiters: list[UUID], parents: list[UUID], children: list[UUID]) -> None:
    everyone = sleepers + waiters + parents
    with psycopg.connect(url, autocommit=True) as conn:
        results = dict(conn.execute("select id, result from jobkit.jobs").fetchall())
        waited = dict(conn.execute("select job_id, count(*) from jobkit.job_attempts where outcome = 'waited'"
                                   " group by 1").fetchall())
        assert conn.execute("select count(*) from jobkit.job_waits").fetchone() == (0,)
    assert {results[j] for j in sleepers} == {"slept"}
    assert [results[j] for j in waiters] == [f"rr{i}" for i in range(WAITERS)]
    gone = {str(c): "gone" for c in children}
    assert all(results[p] and set(results[p].items()) <= set(gone.items()) and len(results[p]) == 2
               for p in parents)
    assert waited == dict.fromkeys(everyone, 1)
    verdict = exactly_once(url, everyone)
    assert verdict.completed == len(everyone) and verdict.runs == dict.fromkeys(everyone, 2)
