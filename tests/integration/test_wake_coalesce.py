"""Wake-ups coalesce across transactions (issue 21, Found 13): no wake-up while a worker drains the
type, at most one a second otherwise, and none is ever lost: a worker goes idle only once no enqueue
that skipped its wake-up is in flight, then looks once more. Against pg_net's stand-in with its real
timing (batches, a 1 s pause), and a real worker process. Latency figures are in bench/ (wake_burst)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.secrets import set_secrets
from poll import wait_for
from standins import PgNetStandIn
from standins.http_server import Server
from workers import SECRET, Worker


@pytest.fixture
def net(db_url: str) -> Iterator[PgNetStandIn]:
    worker = PgNetStandIn(db_url)
    worker.install()
    deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(schedules=False), echo=lambda _m: None)
    with worker:
        yield worker


@pytest.fixture
def wired(db_url: str, net: PgNetStandIn, server: Server) -> str:
    """pg_net transport; wake-ups go to the recording server (no worker)."""
    set_secrets(Database(db_url), Settings(db_url=db_url), url=server.base + "/ok", secret=SECRET)
    return db_url


def _sent(session: Session, job_type: str) -> int:
    return int(session.scalar("select count(*) from jobkit.wakeups where type = %s", (job_type,)))


def _enqueue_one_by_one(url: str, job_type: str, n: int) -> float:
    """``n`` single-row transactions as fast as one connection goes; the seconds it took."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(n):
            conn.execute("select jobkit.enqueue(%s, %s::jsonb)", (job_type, f'{{"i": {i}}}'))
    return time.monotonic() - started


def test_without_a_worker_at_most_one_wake_up_a_second(wired: str, session: Session) -> None:
    took = _enqueue_one_by_one(wired, "mail", 30)
    assert 1 <= _sent(session, "mail") <= 1 + int(took)
    before = _sent(session, "mail")
    session.execute("select jobkit.enqueue('sms', '{}')")  # another type is not held back
    assert _sent(session, "sms") == 1
    assert session.scalar("select jobkit.wake_idle('mail')") is True  # a worker went idle on it:
    session.execute("select jobkit.enqueue('mail', '{}')")  # the wake-up it had is spent
    assert _sent(session, "mail") == before + 1


def test_no_wake_up_while_a_worker_drains_the_type(wired: str, session: Session) -> None:
    session.execute("select jobkit.wake_draining('mail', interval '1 minute')")
    _enqueue_one_by_one(wired, "mail", 100)
    assert _sent(session, "mail") == 0
    session.execute("select jobkit.enqueue('sms', '{}')")
    assert _sent(session, "sms") == 1
    assert session.scalar("select jobkit.wake_idle('mail')") is True
    session.execute("select jobkit.enqueue('mail', '{}')")
    assert _sent(session, "mail") == 1


def test_a_draining_mark_lapses_when_not_refreshed(wired: str, session: Session) -> None:
    """A worker that died stops refreshing: wake-ups resume after its mark lapses."""
    session.execute("select jobkit.wake_draining('mail', interval '0.3 seconds')")
    session.execute("select jobkit.enqueue('mail', '{}')")
    assert _sent(session, "mail") == 0
    time.sleep(0.4)
    session.execute("select jobkit.enqueue('mail', '{}')")
    assert _sent(session, "mail") == 1


def test_the_worker_cannot_go_idle_under_an_enqueue_that_relied_on_it(wired: str, session: Session) -> None:
    """The race: the worker decides to stop just as an enqueue sees "draining". The enqueue holds
    the type's wake lock until it ends, so wake_idle refuses until then; after it, the worker's
    last look sees the job."""
    session.execute("select jobkit.wake_draining('mail', interval '1 minute')")
    with psycopg.connect(wired) as enqueuer:
        enqueuer.execute("select jobkit.enqueue('mail', '{}')")  # skipped its wake-up; not committed
        assert session.scalar("select jobkit.wake_idle('mail')") is False
        assert session.scalar("select jobkit.due_count('mail')") == 0  # invisible until it commits
        enqueuer.commit()
    assert session.scalar("select jobkit.wake_idle('mail')") is True
    assert session.scalar("select jobkit.due_count('mail')") == 1  # the last look finds it
    assert _sent(session, "mail") == 0


def test_an_enqueue_waits_out_a_worker_going_idle_then_wakes(wired: str, session: Session) -> None:
    """The other order: a worker going idle holds the wake lock for its statement; an enqueue that
    comes then reads the state after it and sends its wake-up."""
    session.execute("select jobkit.wake_draining('mail', interval '1 minute')")
    with psycopg.connect(wired) as worker:
        assert worker.execute("select jobkit.wake_idle('mail')").fetchone() == (True,)  # not committed
        done = threading.Event()

        def enqueue() -> None:
            with psycopg.connect(wired, autocommit=True) as conn:
                conn.execute("select jobkit.enqueue('mail', '{}')")
            done.set()

        thread = threading.Thread(target=enqueue)
        thread.start()
        assert not done.wait(0.3)  # blocked on the worker's exclusive lock
        worker.commit()
        thread.join(15)
    assert done.is_set() and _sent(session, "mail") == 1


def test_repeatable_read_enqueues_always_wake(wired: str, session: Session) -> None:
    session.execute("select jobkit.wake_draining('mail', interval '1 minute')")
    with psycopg.connect(wired) as conn:
        conn.execute("set transaction isolation level repeatable read")
        conn.execute("select jobkit.enqueue('mail', '{}')")
        conn.commit()
    assert _sent(session, "mail") == 1


def test_repeatable_read_still_skips_paused_and_switched_off_types(wired: str, session: Session) -> None:
    """Outside READ COMMITTED the single enqueue's inlined path skips the coalescing, not the type's
    own say: a paused type, a type switched off, and every type when the '*' row switches them off
    (unless their own row switches them on) send nothing."""
    session.execute("select jobkit.pause_type('mail')")
    session.execute("insert into jobkit.job_types (type, max_attempts, lease, backoff_base, backoff_factor, "
                    "backoff_cap, backoff_jitter, wake_on_insert) select t.type, 3, '5 min', '1 s', 2, '1 h', 0, "
                    "t.wake from (values ('*', false), ('sms', true)) t(type, wake) "
                    "on conflict (type) do update set wake_on_insert = excluded.wake_on_insert")

    def enqueue(job_type: str) -> None:
        with psycopg.connect(wired) as conn:
            conn.execute("set transaction isolation level repeatable read")
            conn.execute("select jobkit.enqueue(%s, '{}')", (job_type,))
            conn.commit()

    for job_type in ("mail", "push", "sms"):
        enqueue(job_type)
    assert (_sent(session, "mail"), _sent(session, "push"), _sent(session, "sms")) == (0, 0, 1)


def test_a_stopping_worker_hands_the_type_over(wired: str, session: Session) -> None:
    session.execute("select jobkit.wake_draining('mail', interval '1 minute')")
    session.execute("select jobkit.enqueue('mail', '{}')")
    assert _sent(session, "mail") == 0
    assert session.scalar("select jobkit.wake_idle('mail', true)") is True
    assert _sent(session, "mail") == 1  # another worker is woken for the job left behind


def test_a_burst_of_single_row_transactions_is_a_good_neighbour(
    db_url: str, net: PgNetStandIn, server: Server, session: Session, workers: Callable[..., Worker]
) -> None:
    """3,000 single-row transactions as fast as one connection goes, against pg_net's timing and a
    real worker: at most 50 pg_net requests; every job runs once; another type's job and an
    unrelated net.http_get sent right after the burst are delivered (their latency: bench)."""
    worker = workers("--concurrency", "32")
    set_secrets(Database(db_url), Settings(db_url=db_url), url=worker.url + "/run", secret=SECRET)
    _enqueue_one_by_one(db_url, "e2e.ok", 3000)
    other = session.scalar("select jobkit.enqueue('e2e.progress', '{\"seconds\": 0.01}')")
    request = session.scalar("select net.http_get(%s, timeout_milliseconds := 5000)", (server.base + "/ok",))
    assert net.response(request, timeout=20) is not None
    try:
        wait_for(lambda: session.scalar("select count(*) from jobkit.jobs where status = 'completed'") == 3001,
                   60, "every job ran", every=0.1)
    except AssertionError:
        print(session.all("select type, status, count(*) from jobkit.jobs group by 1, 2"))
        print(session.all("select * from jobkit.wakeups"))
        print(session.all("select * from jobkit.wake_drains"))
        worker.proc.kill()
        print(worker.proc.communicate(timeout=10)[0][-5000:])
        raise
    requests = _sent(session, "e2e.ok")
    assert requests <= 50, requests
    assert session.scalar("select status from jobkit.jobs where id = %s", (other,)) == "completed"
    assert session.scalar("select count(*) from jobkit.job_history where outcome = 'completed'") == 3001
    session.scalar("select jobkit.reconcile_wakeups()")
    assert session.scalar("select count(*) from jobkit.wakeups where outcome = 'failed'") == 0


def test_a_job_enqueued_as_the_worker_finishes_is_not_left_behind(
    db_url: str, net: PgNetStandIn, session: Session, workers: Callable[..., Worker]
) -> None:
    """An enqueue that skipped its wake-up because the worker was lingering, and commits only after
    the lingering ended: the worker does not go idle under it, and runs its job, with no wake-up
    and no cron wake-up (none is scheduled here)."""
    worker = workers("--linger", "0.5s")
    set_secrets(Database(db_url), Settings(db_url=db_url), url=worker.url + "/run", secret=SECRET)
    session.execute("select jobkit.enqueue('e2e.ok', '{}')")
    wait_for(lambda: session.scalar("select count(*) from jobkit.jobs where status = 'completed'") == 1,
               20, "the first job ran")
    with psycopg.connect(db_url) as late:
        late.execute("select jobkit.enqueue('e2e.ok', '{\"late\": true}')")  # the worker is lingering
        time.sleep(1.5)  # well past the lingering
        late.commit()
    wait_for(lambda: session.scalar("select count(*) from jobkit.jobs where status = 'completed'") == 2,
               10, "the late job ran")
    assert _sent(session, "e2e.ok") == 1


def test_a_stopping_worker_hands_its_type_to_another(
    db_url: str, net: PgNetStandIn, session: Session, workers: Callable[..., Worker]
) -> None:
    """A worker drains a type (so an enqueue skips its wake-up) and is stopped before that enqueue
    commits: its hand-over wakes another worker (pg_net calls B), which runs the job."""
    first, second = workers("--linger", "30s"), workers()
    set_secrets(Database(db_url), Settings(db_url=db_url), url=second.url + "/run", secret=SECRET)
    assert first.run({"type": "e2e.ok"}).status_code == 202  # A drains e2e.ok, then lingers 30 s
    wait_for(lambda: session.scalar("select draining_until > clock_timestamp() from jobkit.wake_drains "
                                      "where type = 'e2e.ok'") is True, 10, "A marked e2e.ok draining")
    with psycopg.connect(db_url) as late:
        job = late.execute("select jobkit.enqueue('e2e.ok', '{}')").fetchone()  # skipped: A drains
        assert _sent(session, "e2e.ok") == 0
        code, _out = first.stop()
        assert code == 0
        assert _sent(session, "e2e.ok") == 1  # A's hand-over
        late.commit()
    assert job is not None
    wait_for(lambda: session.scalar("select status from jobkit.jobs where id = %s", (job[0],)) == "completed",
               20, "B ran the job")
    assert session.scalar("select worker_id from jobkit.jobs where id = %s", (job[0],)) == second.health()["worker"]
    assert _sent(session, "e2e.ok") == 1
