"""jobkit.wait / wait_async / enqueue(wait=True): the result of a job a worker in another process
completed, JobFailed on failed and dead jobs, WaitTimeout, polling when no notification arrives, and
the completion notifications the finishing statements send (sql/migrations/0006_results.sql)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import jobkit
import psycopg
import pytest
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, DatabaseError, JobFailed, NotFound, WaitTimeout
from jobkit.jobs import Failure, NewJob, Status
from jobkit.lifecycle import Lifecycle
from poll import wait_for
from workers import Worker

CHANNEL = "jobkit_done"


@pytest.fixture
def workers(db_url: str) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        started.append(Worker(db_url, "--listen", *args))
        return started[-1]

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.communicate(timeout=10)


def _listening(db_url: str) -> int:
    """Connections of this database that LISTEN wait()'s channel (they poll job_state)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("select count(*) from pg_stat_activity where datname = current_database() "
                           "and query like '%%from \"jobkit\".jobs where id operator(pg_catalog.=)%%' "
                           "and pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0


def test_wait_returns_the_result_of_a_job_a_worker_process_completed(
        db_url: str, workers: Callable[..., Worker]) -> None:
    workers()
    job_id = jobkit.enqueue(db_url, "e2e.ok", {"n": 7})
    done = jobkit.wait(db_url, job_id, timeout=30)
    assert (done.id, done.status, done.result, done.attempts) == (
        job_id, Status.COMPLETED, {"echo": {"n": 7}, "attempt": 1}, 1)
    assert done.completed_at is not None and done.error is None
    assert jobkit.wait(db_url, str(job_id), timeout=0).result == done.result  # finished: no waiting


def test_enqueue_wait_true_and_wait_async(db_url: str, workers: Callable[..., Worker]) -> None:
    workers()
    done = jobkit.enqueue(db_url, "e2e.ok", ["a"], wait=True, timeout=30)
    assert done.status == Status.COMPLETED and done.result == {"echo": ["a"], "attempt": 1}

    async def main() -> tuple[jobkit.JobResult, jobkit.JobResult]:
        by_url = await jobkit.enqueue_async(db_url, "e2e.ok", {"async": True}, wait=True, timeout=30)
        job_id = await jobkit.enqueue_async(db_url, "e2e.ok", {"async": 2})
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            polled = await jobkit.wait_async(conn, job_id, timeout=30)  # the caller's connection: polled
        return by_url, polled

    by_url, polled = asyncio.run(main())
    assert by_url.result == {"echo": {"async": True}, "attempt": 1}
    assert polled.result == {"echo": {"async": 2}, "attempt": 1}


def test_wait_raises_job_failed_with_the_last_error_on_failed_and_dead_jobs(
        db_url: str, workers: Callable[..., Worker], manager: Lifecycle) -> None:
    workers()
    job_id = jobkit.enqueue(db_url, "e2e.fail", {})  # 2 attempts, 1 s apart, then failed
    with pytest.raises(JobFailed) as failed:
        jobkit.wait(db_url, job_id, timeout=30)
    assert failed.value.status == Status.FAILED and failed.value.job_id == job_id
    assert "upstream refused (attempt 2)" in (failed.value.error or "")
    assert "upstream refused (attempt 2)" in failed.value.message and failed.value.hint
    assert failed.value.job.attempts == 2
    assert manager.sweep_dead() == 1
    with pytest.raises(JobFailed) as dead:
        jobkit.wait(db_url, job_id, timeout=5)
    assert dead.value.status == Status.DEAD and "attempt 2" in (dead.value.error or "")


def test_wait_raises_on_a_cancelled_job_and_an_unknown_id(db_url: str, manager: Lifecycle) -> None:
    job_id = jobkit.enqueue(db_url, "nobody.handles", {})
    assert manager.cancel(job_id)
    with pytest.raises(JobFailed) as cancelled:
        jobkit.wait(db_url, job_id, timeout=5)
    assert cancelled.value.status == Status.CANCELLED
    with pytest.raises(NotFound):
        jobkit.wait(db_url, uuid.uuid4(), timeout=5)
    with pytest.raises(ConfigError):
        jobkit.wait(db_url, "not-a-uuid", timeout=5)
    with pytest.raises(ConfigError, match="listen=True needs a database URL"):
        jobkit.wait(manager.session, job_id, listen=True)  # it would LISTEN on the caller's connection
    with pytest.raises(JobFailed):
        jobkit.wait(manager.session, job_id, timeout=5)  # the caller's session: polled


def test_wait_times_out_cleanly(db_url: str) -> None:
    job_id = jobkit.enqueue(db_url, "nobody.handles", {})
    with pytest.raises(WaitTimeout) as late:
        jobkit.wait(db_url, job_id, timeout=0.3)
    assert late.value.status == "pending" and late.value.job_id == job_id
    assert "did not finish within 0.3s" in late.value.message and late.value.hint
    # issue 26: a job nobody claimed says so, and the hint names the worker
    assert "no worker has claimed it yet" in late.value.message and "jobkit worker serve" in late.value.hint
    wait_for(lambda: _listening(db_url) == 0, 10, "wait() left its connection open")

    async def main() -> None:
        with pytest.raises(WaitTimeout):
            await jobkit.wait_async(db_url, job_id, timeout=0.2)

    asyncio.run(main())
    wait_for(lambda: _listening(db_url) == 0, 10, "wait_async() left its connection open")


def test_enqueue_wait_refuses_an_open_transaction(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:  # not autocommit: the job would exist only after commit
        with pytest.raises(ConfigError, match="open transaction"):
            jobkit.enqueue(conn, "e2e.ok", {}, wait=True, timeout=1)
        assert conn.execute("select count(*) from jobkit.jobs").fetchone() == (0,)  # nothing enqueued


def _finish_behind_its_back(db_url: str, job_id: uuid.UUID) -> threading.Thread:
    """Once the waiter has read the job, complete it with a plain UPDATE: no notification is sent
    (as behind PgBouncer or Supavisor in transaction mode, where LISTEN never hears anything)."""
    def finish() -> None:
        wait_for(lambda: _listening(db_url) > 0, 20, "the waiter never read the job")
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("update jobkit.jobs set status = 'completed', result = '{\"by\": \"update\"}',"
                         " completed_at = now() where id = %s", (job_id,))

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("listen", [None, False])
def test_wait_polls_when_no_notification_arrives(db_url: str, listen: bool | None) -> None:
    job_id = jobkit.enqueue(db_url, "nobody.handles", {})
    finisher = _finish_behind_its_back(db_url, job_id)
    done = jobkit.wait(db_url, job_id, timeout=30, poll=0.2, listen=listen)
    finisher.join(10)
    assert done.status == Status.COMPLETED and done.result == {"by": "update"}


def test_wait_async_polls_when_no_notification_arrives(db_url: str) -> None:
    job_id = jobkit.enqueue(db_url, "nobody.handles", {})
    finisher = _finish_behind_its_back(db_url, job_id)
    done = asyncio.run(jobkit.wait_async(db_url, job_id, timeout=30))
    finisher.join(10)
    assert done.result == {"by": "update"}


def _notes(listener: Session) -> list[str]:
    got: list[str] = []
    while batch := listener.notifies(0.2):
        got += [payload for _channel, payload in batch]
    return got


def _waiting(db_url: str) -> set[str]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return {str(r[0]) for r in conn.execute("select job_id from jobkit.waiters")}


def test_finishing_statements_notify_waiters_once_per_statement(db_url: str, manager: Lifecycle) -> None:
    """What wait() LISTENs for: the ids of the jobs it registered (wait_on, 0014) that finished
    (completed, failed for good, cancelled, swept out of attempts), one notification per 200 ids,
    nothing for retries and nothing for jobs nobody waits on; a notified job's waiter row is gone."""
    wait = timedelta(minutes=1)
    with Database(db_url).session() as listener:
        listener.listen(CHANNEL)
        ids = manager.enqueue_many([NewJob("n", {}, max_attempts=1) for _ in range(450)])
        claimed = manager.claim("n", 450, "w", timedelta(seconds=30))
        manager.wait_on([c.id for c in claimed[:401]] + [ids[449]], wait)
        assert not _notes(listener)  # enqueue, claim and registering send nothing
        assert manager.complete([(c.id, c.attempts, None) for c in claimed[:420]])  # 19 not waited on
        notes = _notes(listener)
        assert len(notes) == 3 and [len(n.split(",")) for n in notes] == [200, 200, 1]
        assert {i for n in notes for i in n.split(",")} == {str(c.id) for c in claimed[:401]}
        assert _waiting(db_url) == {str(ids[449])}

        retry, final = manager.enqueue_many([NewJob("r", {}, max_attempts=2), NewJob("r", {}, max_attempts=1)])
        manager.wait_on([retry, final], wait)
        attempts = {c.id: c.attempts for c in manager.claim("r", 2, "w", timedelta(seconds=30))}
        assert manager.fail([Failure(i, attempts[i], "boom") for i in (retry, final)]) == {
            retry: "pending", final: "failed"}
        assert _notes(listener) == [str(final)]  # the retry is not finished
        assert str(retry) in _waiting(db_url)

        cancelled = ids[449]
        assert manager.cancel(cancelled)
        assert _notes(listener) == [str(cancelled)]

        stuck = manager.enqueue(NewJob("s", {}, max_attempts=1))
        manager.wait_on([stuck], wait)
        manager.claim("s", 1, "w", timedelta(seconds=5))
        listener.execute("update jobkit.jobs set lease_expires_at = now() - interval '1 second' "
                         "where id = %(id)s", {"id": stuck})
        assert manager.sweep_stuck() == {stuck: "failed"}
        assert _notes(listener) == [str(stuck)]


def test_no_notification_when_nobody_waits(db_url: str, manager: Lifecycle) -> None:
    """The no-waiter case (the common one): finishing jobs sends no NOTIFY at all."""
    with Database(db_url).session() as listener:
        listener.listen(CHANNEL)
        assert _waiting(db_url) == set()
        manager.enqueue_many([NewJob("quiet", {}, max_attempts=1) for _ in range(3)])
        claimed = manager.claim("quiet", 3, "w", timedelta(seconds=30))
        assert manager.complete([(c.id, c.attempts, None) for c in claimed[:2]])
        assert manager.fail([Failure(claimed[2].id, claimed[2].attempts, "boom")]) == {claimed[2].id: "failed"}
        assert _notes(listener) == []


def test_waiter_rows_expire_and_prune_deletes_them(db_url: str, manager: Lifecycle) -> None:
    gave_up, waiting = manager.enqueue(NewJob("w", {})), manager.enqueue(NewJob("w", {}))
    manager.wait_on([gave_up], timedelta(0))
    manager.wait_on([waiting, waiting], timedelta(minutes=5))
    manager.wait_on([waiting], timedelta(seconds=1))  # a shorter second wait keeps the longer one
    manager.prune(timedelta(days=7))
    assert _waiting(db_url) == {str(waiting)}
    with psycopg.connect(db_url, autocommit=True) as conn:
        left = conn.execute("select expires_at - now() > interval '4 minutes' from jobkit.waiters").fetchone()
    assert left == (True,)
    with pytest.raises(DatabaseError, match="p_for must be a non-negative interval"):
        manager.wait_on([waiting], timedelta(seconds=-1))


def test_wait_registers_its_job_and_is_woken_by_the_completion(db_url: str, manager: Lifecycle) -> None:
    """wait() on a URL registers the job after it LISTENs; the completion wakes it (long before
    its 5 s poll) and deletes the registration."""
    job_id = manager.enqueue(NewJob("woken", {}))
    result: list[jobkit.JobResult] = []
    waiter = threading.Thread(target=lambda: result.append(jobkit.wait(db_url, job_id, timeout=60)), daemon=True)
    waiter.start()
    wait_for(lambda: str(job_id) in _waiting(db_url), 20, "wait() registered its job")
    [claimed] = manager.claim("woken", 1, "w", timedelta(seconds=30))
    assert manager.complete([(claimed.id, claimed.attempts, '{"ok": 1}')])
    waiter.join(20)
    assert result and result[0].result == {"ok": 1}
    assert _waiting(db_url) == set()
