"""PostgreSQL restarts (`pg_ctl restart -m immediate`) while 1,000 jobs sleep or wait (issue 25's
acceptance): 400 sleep (ctx.sleep_until), 400 wait for an event (ctx.wait_for_event), and 100
parents, each of which started two children (a quick one, and one that waits for an event), wait
for them (ctx.wait_for_jobs) beside their 100 waiting children. The 500 emits are sent by four
threads while the server goes down and comes back, each retried until it commits (with its id: a
retry of an emit that did commit is the same event); some of them are sent while it is down. No
emit is lost, and every job resumes, once, and completes exactly once: the sleepers through the
worker's timers and the claim of their type, the event waits through the emits' own
transactions, the parents through their children's completion, the sweep (ticker) as the
backstop. Every run of a handler records a side effect: each waiting job ran exactly twice
(before its wait, and replayed after it), except that a replay the crash cut off (of a job an
early emit resumed) may have run once more.

JOBKIT_WAIT_RESTART_JOBS sets the number of sleeping or waiting jobs (default 1,000)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
from faultkit import Ticker, count, exactly_once, prepare
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from poll import wait_for
from workers import Worker

JOBS = int(os.environ.get("JOBKIT_WAIT_RESTART_JOBS", "1000"))
PARENTS = JOBS // 10  # each waits with one waiting child: 2 waiting jobs per parent
SLEEPERS = (JOBS - 2 * PARENTS) // 2
WAITERS = JOBS - 2 * PARENTS - SLEEPERS
EMITTERS = 4  # threads, each with its own connection
PACE = 0.02  # seconds between each emitter's emits that span the restart
SLEEP = 5.0  # seconds from the sleepers' enqueue: they are all asleep by then (measured: about 2 s)


class Emitter(threading.Thread):
    """Emits fault.go with each of ``keys`` on one connection, in a thread: each emit is retried
    (with its id: a retry of an emit that did commit is the same event) until it commits,
    reconnecting while the server is down. ``started`` is set after the first ``before`` emits; the
    rest are paced PACE apart, so that they span the restart."""

    def __init__(self, url: str, keys: list[str], before: int) -> None:
        super().__init__(name="emitter", daemon=True)
        self.url, self.keys, self.before = url, keys, before
        self.conn: psycopg.Connection | None = None
        self.started, self.retried = threading.Event(), set[str]()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for n, key in enumerate(self.keys):
                if n == self.before:
                    self.started.set()
                self._emit(key)
                if n >= self.before:
                    time.sleep(PACE)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            self.started.set()
            if self.conn is not None:
                self.conn.close()

    def _emit(self, key: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                self.conn.execute("select jobkit.emit('fault.go', %s, %s::jsonb, %s)",
                                  (key, f'"{key}"', f"restart-{key}"))
                return
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "the server did not come back"
                self.retried.add(key)
                if self.conn is not None:
                    self.conn.close()
                time.sleep(0.1)


def _enqueue_waits(url: str) -> tuple[list[UUID], list[UUID]]:
    """The parents (which start their children) and the event waiters."""
    with Database(url).session() as s:
        life = Lifecycle(s)
        children = [[{"type": "fault.child", "payload": {}},
                     {"type": "fault.waiter", "payload": {"key": f"c{i}"}}] for i in range(PARENTS)]
        parents = life.enqueue_many([NewJob("fault.parent", {"children": c}) for c in children])
        waiters = life.enqueue_many([NewJob("fault.waiter", {"key": str(i)}) for i in range(WAITERS)])
    return parents, waiters


def _enqueue_sleepers(url: str) -> list[UUID]:
    """The sleepers, once the rest waits: they all sleep until the same moment, SLEEP from now."""
    until = (datetime.now(UTC) + timedelta(seconds=SLEEP)).timestamp()
    with Database(url).session() as s:
        return Lifecycle(s).enqueue_many([NewJob("fault.sleeper", {"until": until}) for _ in range(SLEEPERS)])


def _runs_before_the_crash(url: str) -> dict[UUID, int]:
    """Per job, its runs that began before the server restarted (its start time now)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("select job_id, count(*) from side_effects where at < pg_postmaster_start_time()"
                                 " group by 1").fetchall())


def test_sleeping_and_waiting_jobs_resume_after_a_restart(restartable: LocalCluster, fault_url: str,
                                                          workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    worker = workers(url, "--concurrency", "8", "--listen")
    parents, waiters = _enqueue_waits(url)
    wait_for(lambda: count(url, "status = 'waiting'") == JOBS - SLEEPERS, 60, "the parents and waiters waiting")
    sleepers = _enqueue_sleepers(url)
    took = wait_for(lambda: count(url, "status = 'waiting'") == JOBS, 60, "every job waiting")
    with psycopg.connect(url, autocommit=True) as conn:  # asleep until after the restart began
        early = conn.execute("select count(*) from jobkit.job_waits where due <= now()").fetchone()
    assert early == (0,), f"a sleep ended before the restart ({took:.1f}s to get {SLEEPERS} jobs asleep)"
    keys = [str(i) for i in range(WAITERS)] + [f"c{i}" for i in range(PARENTS)]
    emitters = [Emitter(url, keys[i::EMITTERS], before=len(keys) // EMITTERS // 5) for i in range(EMITTERS)]
    for e in emitters:
        e.start()
    for e in emitters:
        e.started.wait(30)
    restartable.restart("immediate")  # the emits go on meanwhile
    back = time.monotonic()
    for e in emitters:
        e.join(90)
        assert e.error is None and not e.is_alive()
    retried = {key for e in emitters for key in e.retried}
    assert retried, "no emit was sent while the server was down"
    with Ticker(url, wake=False):
        wait_for(lambda: count(url, "status = 'completed'") == JOBS + PARENTS, 90, "every job resuming")
    resumed = time.monotonic() - back
    assert worker.alive
    with psycopg.connect(url, autocommit=True) as conn:
        kids = {p: dict(conn.execute(
            "select payload ->> 'key', id from jobkit.jobs where payload ->> 'parent' = %s", (str(p),)).fetchall())
            for p in parents}
        results = dict(conn.execute("select id, result from jobkit.jobs").fetchall())
        waited = dict(conn.execute("select job_id, count(*) from jobkit.job_attempts where outcome = 'waited'"
                                   " group by 1").fetchall())
        assert conn.execute("select count(*) from jobkit.job_waits").fetchone() == (0,)
        assert conn.execute("select count(*) from jobkit.jobs where status <> 'completed'").fetchone() == (0,)
    waiting = parents + waiters + sleepers + [kids[p][f"c{i}"] for i, p in enumerate(parents)]
    verdict = exactly_once(url, [*waiting, *(kids[p][None] for p in parents)])
    assert verdict.completed == JOBS + PARENTS
    assert [results[j] for j in waiters] == [str(i) for i in range(WAITERS)]
    assert {results[j] for j in sleepers} == {"slept"}
    assert [results[p] for p in parents] == [{str(k): "completed" for k in kids[p].values()} for p in parents]
    assert waited == dict.fromkeys(waiting, 1)
    # each waiting job ran twice (before its wait, replayed after it), the quick children once; only
    # a run begun before the crash (a replay of a job its emit resumed early) may have run once more
    expected = {**dict.fromkeys(waiting, 2), **{kids[p][None]: 1 for p in parents}}
    begun = _runs_before_the_crash(url)
    may = {j: min(1, begun.get(j, 0) - (1 if j in waited else 0)) for j in expected}  # not the pre-wait run
    assert set(verdict.runs) == set(expected)
    extra = {j: n - expected[j] for j, n in verdict.runs.items() if n != expected[j]}
    assert all(0 < n <= may[j] for j, n in extra.items()), (extra, may)
    print(f"[faults] restart -m immediate with {JOBS} jobs sleeping or waiting ({SLEEPERS} sleeping, {WAITERS} "
          f"waiting for events, {PARENTS} waiting for their children, {PARENTS} children waiting): "
          f"{len(retried)} of {len(keys)} emits sent while the server was down; every job resumed once "
          f"and completed exactly once, the last {resumed:.1f}s after the server was back; {len(extra)} run(s) "
          f"cut off by the crash ran again")
