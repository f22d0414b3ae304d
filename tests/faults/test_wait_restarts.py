"""PostgreSQL restarts (`pg_ctl restart -m immediate`) while 200 jobs sleep and 200 wait for events
(issue 25): the emits sent while the server is down are retried by their sender until one commits,
and every job resumes and completes: the sleepers through the worker's timers and the claim of
their type, the waiters through the emits' own transactions, the sweep (ticker) as the backstop."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from faultkit import Ticker, count, prepare
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from poll import wait_for
from workers import Worker

N = 200


def _emit(url: str, key: int) -> None:
    """Emit until it commits (the server may be down or restarting)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                conn.execute("select jobkit.emit('fault.go', %s, %s::jsonb)", (str(key), str(key)))
                return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "the server did not come back"
            time.sleep(0.2)


def test_sleeping_and_waiting_jobs_resume_after_a_restart(restartable: LocalCluster, fault_url: str,
                                                          workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    worker = workers(url, "--concurrency", "8", "--listen")
    with Database(url).session() as s:
        life = Lifecycle(s)
        sleepers = life.enqueue_many([NewJob("fault.sleeper", {"for": 4}) for _ in range(N)])
        waiters = life.enqueue_many([NewJob("fault.waiter", {"key": i}) for i in range(N)])
    wait_for(lambda: count(url, "status = 'waiting'") == 2 * N, 30, "every job waiting")
    restartable.restart("immediate")
    for i in range(N):  # sent as the server comes back: none may be lost
        _emit(url, i)
    with Ticker(url, wake=False):
        wait_for(lambda: count(url, "status = 'completed'") == 2 * N, 45, "every job resuming")
    assert worker.alive
    with psycopg.connect(url, autocommit=True) as conn:
        results = dict(conn.execute("select id, result from jobkit.jobs where id = any(%s)", (waiters,)).fetchall())
        assert [results[j] for j in waiters] == list(range(N))
        assert conn.execute("select count(*) from jobkit.job_waits").fetchone() == (0,)
        assert conn.execute("select count(*) from jobkit.jobs where id = any(%s) and result = '\"slept\"'",
                            (sleepers,)).fetchone() == (N,)
