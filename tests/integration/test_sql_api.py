"""The SQL API against the real database: claims, fencing, retries, sweeps, idempotency, pruning."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from jobkit.connector import Session
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle

MIN = timedelta(minutes=1)


def test_enqueue_defaults_match_the_seed(manager: Lifecycle) -> None:
    job = manager.get(manager.enqueue(NewJob("t", {"a": 1})))
    assert job is not None
    assert (job.status, job.priority, job.attempts, job.max_attempts) == ("pending", 0, 0, None)
    assert job.payload == {"a": 1} and job.result is None and job.started_at is None


def test_pick_orders_by_priority_then_due_time(manager: Lifecycle) -> None:
    ids = [manager.enqueue(NewJob("t", {"i": i}, priority=p)) for i, p in enumerate([0, 2, 1, 2, 0])]
    order = [manager.claim("t", 1, "w", MIN)[0].id for _ in ids]
    assert order == [ids[1], ids[3], ids[2], ids[0], ids[4]]
    assert manager.claim("t", 1, "w", MIN) == []


def test_pick_skips_future_jobs_and_other_types(session: Session, manager: Lifecycle) -> None:
    later = session.scalar("select now() + interval '1 hour'")
    manager.enqueue(NewJob("t", {}, priority=9, run_at=later))
    manager.enqueue(NewJob("other", {}))
    now_id = manager.enqueue(NewJob("t", {}))
    picked = manager.claim("t", 10, "w1", MIN)
    assert [j.id for j in picked] == [now_id]
    job = manager.get(now_id)
    assert job is not None and (job.status, job.attempts, job.worker_id) == ("processing", 1, "w1")
    assert job.lease_expires_at is not None and job.started_at is not None
    assert timedelta(seconds=59) < job.lease_expires_at - job.started_at <= MIN


def test_pick_job_keeps_the_seed_signature(session: Session, manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    row = session.one("select id, status, attempts from jobkit.pick_job('t')")
    assert row == {"id": job_id, "status": "processing", "attempts": 1}


def test_complete_is_fenced_on_the_attempt(manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    [job] = manager.claim("t", 1, "w", MIN)
    assert manager.complete([(job.id, job.attempts + 1, '{"x": 1}')]) == set()
    assert manager.complete([(job.id, job.attempts, '{"x": 2}')]) == {job_id}
    assert manager.complete([(job.id, job.attempts, '{"x": 3}')]) == set()
    done = manager.get(job_id)
    assert done is not None and done.status == "completed" and done.result == {"x": 2}
    assert done.completed_at is not None and done.lease_expires_at is None
    assert [a.outcome for a in manager.history(job_id)] == ["completed"]


def test_fencing_after_lease_expiry_and_reclaim(session: Session, manager: Lifecycle) -> None:
    """A claims, its lease expires, the sweep runs, B claims; A's late calls change nothing."""
    job_id = manager.enqueue(NewJob("t", {}))
    [a] = manager.claim("t", 1, "A", MIN)
    _expire(session, job_id)
    assert manager.sweep_stuck() == {job_id: "pending"}
    _make_due(session, job_id)
    [b] = manager.claim("t", 1, "B", MIN)
    held = manager.get(job_id)
    assert (b.id, b.attempts) == (job_id, 2) and held is not None and held.worker_id == "B"
    assert manager.complete([(job_id, a.attempts, '{"by": "A"}')]) == set()
    assert manager.fail([Failure(job_id, a.attempts, "late A")]) == {}
    assert not manager.snooze(job_id, a.attempts, MIN)
    assert manager.extend([(job_id, a.attempts)], MIN) == set()
    assert manager.complete([(job_id, b.attempts, '{"by": "B"}')]) == {job_id}
    final = manager.get(job_id)
    assert final is not None and final.result == {"by": "B"} and final.last_error is not None
    outcomes = [(h.attempt, h.worker_id, h.outcome) for h in manager.history(job_id)]
    assert outcomes == [(1, "A", "lease_expired"), (2, "B", "completed")]


def test_fail_job_sql_returns_null_when_fenced(session: Session, manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    manager.claim("t", 1, "w", MIN)
    assert session.scalar("select jobkit.fail_job(%s, 7, 'x')", (job_id,)) is None
    assert session.scalar("select jobkit.complete_job(%s, 7, '{}')", (job_id,)) is False
    assert session.scalar("select jobkit.fail_job(%s, 1, 'boom')", (job_id,)) == "pending"


def test_snooze_does_not_consume_the_attempt(manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    [job] = manager.claim("t", 1, "w", MIN)
    claimed = manager.get(job_id)
    assert manager.snooze(job_id, job.attempts, timedelta(seconds=30))
    after = manager.get(job_id)
    assert claimed is not None and claimed.started_at is not None
    assert after is not None and (after.status, after.attempts) == ("pending", 0)
    assert timedelta(seconds=29) < after.scheduled_for - claimed.started_at < timedelta(seconds=32)
    assert manager.claim("t", 1, "w", MIN) == []
    assert [a.outcome for a in manager.history(job_id)] == ["snoozed"]


def test_extend_lease_pushes_the_deadline(manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    [job] = manager.claim("t", 1, "w", timedelta(seconds=10))
    before = manager.get(job_id)
    assert manager.extend([(job_id, job.attempts)], timedelta(minutes=10)) == {job_id}
    after = manager.get(job_id)
    assert before is not None and before.lease_expires_at is not None
    assert after is not None and after.lease_expires_at is not None
    assert after.lease_expires_at - before.lease_expires_at > timedelta(minutes=9)


def test_sweep_stuck_fails_exhausted_jobs(session: Session, manager: Lifecycle) -> None:
    """The seed's sweep skipped jobs with no attempts left: they stayed processing forever."""
    job_id = manager.enqueue(NewJob("t", {}, max_attempts=1))
    manager.claim("t", 1, "w", MIN)
    _expire(session, job_id)
    assert manager.sweep_stuck() == {job_id: "failed"}
    job = manager.get(job_id)
    assert job is not None and job.status == "failed" and "lease expired" in (job.last_error or "")
    assert manager.sweep_dead() == 1
    dead = manager.get(job_id)
    assert dead is not None and dead.status == "dead"
    assert manager.sweep_stuck() == {} and manager.sweep_dead() == 0


def test_sweep_stuck_leaves_live_leases_alone(manager: Lifecycle) -> None:
    manager.enqueue(NewJob("t", {}))
    manager.claim("t", 1, "w", MIN)
    assert manager.sweep_stuck() == {}


def test_sweep_stuck_retries_with_backoff(session: Session, manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    manager.claim("t", 1, "w", MIN)
    _expire(session, job_id)
    manager.sweep_stuck()
    delay = session.scalar("select scheduled_for - now() from jobkit.jobs where id = %s", (job_id,))
    assert timedelta(seconds=26) < delay < timedelta(seconds=34)


def test_cancel_refuses_a_running_attempts_result(manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    [job] = manager.claim("t", 1, "w", MIN)
    assert manager.cancel(job_id)
    assert manager.complete([(job_id, job.attempts, '{}')]) == set()
    cancelled = manager.get(job_id)
    assert cancelled is not None and cancelled.status == "cancelled"
    assert not manager.cancel(job_id)


def test_retry_job_revives_dead_jobs_with_fresh_attempts(session: Session, manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}, max_attempts=1))
    [job] = manager.claim("t", 1, "w", MIN)
    assert manager.fail([Failure(job_id, job.attempts, "boom")]) == {job_id: "failed"}
    manager.sweep_dead()
    assert manager.retry(job_id)
    revived = manager.get(job_id)
    assert revived is not None and (revived.status, revived.attempts, revived.round_start) == ("pending", 1, 1)
    [again] = manager.claim("t", 1, "w", MIN)
    assert (again.id, again.attempts) == (job_id, 2)  # a fresh round of the job's own max_attempts (1)
    assert manager.fail([Failure(job_id, 2, "boom again")]) == {job_id: "failed"}
    assert manager.retry(job_id) and not manager.retry(job_id)  # a pending job has nothing to retry
    assert manager.get(job_id).round_start == 2  # type: ignore[union-attr]


def test_permanent_failure_never_retries(manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}, max_attempts=5))
    [job] = manager.claim("t", 1, "w", MIN)
    assert manager.fail([Failure(job_id, job.attempts, "bad input", permanent=True)]) == {job_id: "failed"}


def test_explicit_retry_in_is_never_immediate(session: Session, manager: Lifecycle) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    [job] = manager.claim("t", 1, "w", MIN)
    manager.fail([Failure(job_id, job.attempts, "x", retry_in=timedelta(0))])
    delay = session.scalar("select scheduled_for - now() from jobkit.jobs where id = %s", (job_id,))
    assert delay > timedelta(milliseconds=900)
    assert manager.claim("t", 1, "w", MIN) == []


def test_enqueue_many_keeps_order_and_keys(manager: Lifecycle) -> None:
    existing = manager.enqueue(NewJob("t", {}, idempotency_key="k0"))
    ids = manager.enqueue_many([
        NewJob("t", {"i": 0}), NewJob("t", {"i": 1}, idempotency_key="k0"),
        NewJob("t", {"i": 2}, idempotency_key="k1"), NewJob("u", {"i": 3}, idempotency_key="k1"),
        NewJob("t", {"i": 4}, idempotency_key="k1"), NewJob("t", {"i": 5}, priority=3),
    ])
    assert ids[1] == existing and ids[4] == ids[2] and ids[3] != ids[2]
    assert len(set(ids)) == 5
    payloads = [manager.get(i).payload for i in ids]  # type: ignore[union-attr]
    assert payloads == [{"i": 0}, {}, {"i": 2}, {"i": 3}, {"i": 2}, {"i": 5}]


def test_enqueue_many_without_keys_keeps_order_types_and_defaults(
    session: Session, manager: Lifecycle
) -> None:
    """The key-less path inserts straight from the JSON documents: every column lands on its job."""
    session.execute("insert into jobkit.job_types select 'five', 5, lease, backoff_base, backoff_factor, "
                    "backoff_cap, backoff_jitter, wake_on_insert, rate_limit from jobkit.job_types where type = '*'")
    later = session.scalar("select now() + interval '1 hour'")
    batch = [NewJob("t", {"i": 0}), NewJob("five", [1, 2], priority=7), NewJob("t", "text", run_at=later),
             NewJob("five", None, max_attempts=9), NewJob("t", {"i": 4}, delay=timedelta(minutes=5))]
    ids = manager.enqueue_many(batch)
    jobs = [manager.get(i) for i in ids]
    assert [(j.type, j.payload, j.priority, j.max_attempts) for j in jobs if j] == [
        ("t", {"i": 0}, 0, None), ("five", [1, 2], 7, None), ("t", "text", 0, None), ("five", None, 0, 9),
        ("t", {"i": 4}, 0, None)]
    assert jobs[2] is not None and jobs[2].scheduled_for == later
    assert jobs[4] is not None and jobs[4].scheduled_for > jobs[0].scheduled_for + timedelta(minutes=4)
    same = manager.enqueue_many([NewJob("five", {"n": n}) for n in range(300)])  # one type: one string
    assert [manager.get(i).payload for i in same[::50]] == [{"n": n} for n in range(0, 300, 50)]  # type: ignore[union-attr]


def test_enqueue_json_rejects_malformed_documents(session: Session) -> None:
    import pytest
    from jobkit.exceptions import DatabaseError

    with pytest.raises(DatabaseError, match="p_payloads must be a JSON array"):
        session.execute("select jobkit.enqueue_json('\"t\"', '{}')")
    with pytest.raises(DatabaseError, match="must have the same length"):
        session.execute("select jobkit.enqueue_json('[\"t\"]', '[1, 2]')")
    assert session.scalar("select count(*) from jobkit.jobs") == 0


def test_enqueue_json_takes_the_callers_ids_on_the_plain_path(session: Session) -> None:
    """p_ids (issue 23): one id a job, used as the new jobs' ids in input order; a wrong count is
    refused before anything is inserted; a keyed batch (enqueue_many's path) draws its own."""
    import uuid

    import pytest
    from jobkit.exceptions import DatabaseError

    given = [uuid.uuid4() for _ in range(3)]
    got = [r["id"] for r in session.all(
        "select e.id from jobkit.enqueue_json('\"t\"', '[{\"i\": 0}, {\"i\": 1}, {\"i\": 2}]', p_ids => %s) "
        "as e(id)", (given,))]
    assert got == given
    stored = {r["id"]: r["payload"]["i"] for r in session.all("select id, payload from jobkit.jobs")}
    assert [stored[i] for i in given] == [0, 1, 2]
    with pytest.raises(DatabaseError, match="p_ids must hold one id a job"):
        session.execute("select jobkit.enqueue_json('\"t\"', '[1, 2]', p_ids => %s)", (given,))
    assert session.scalar("select count(*) from jobkit.jobs") == 3
    keyed = session.scalar("select jobkit.enqueue_json('\"t\"', '[1]', p_idempotency_key => '{k}', "
                           "p_ids => %s)", ([uuid.uuid4()],))
    assert keyed not in given and session.scalar("select count(*) from jobkit.jobs") == 4


def test_idempotency_key_frees_up_once_the_job_finished(manager: Lifecycle) -> None:
    first = manager.enqueue(NewJob("t", {}, idempotency_key="k"))
    [job] = manager.claim("t", 1, "w", MIN)
    manager.complete([(first, job.attempts, None)])
    assert manager.enqueue(NewJob("t", {}, idempotency_key="k")) != first


def test_prune_deletes_old_finished_jobs_and_their_history(session: Session, manager: Lifecycle) -> None:
    keep_pending = manager.enqueue(NewJob("p", {}))
    ids = manager.enqueue_many([NewJob("t", {"i": i}) for i in range(25)])
    done = manager.claim("t", 25, "w", MIN)
    manager.complete([(j.id, j.attempts, None) for j in done])
    session.execute("update jobkit.jobs set completed_at = now() - interval '8 days' where type = 't'")
    recent = manager.enqueue(NewJob("t", {}))
    [r] = manager.claim("t", 1, "w", MIN)
    manager.complete([(recent, r.attempts, None)])
    assert manager.prune(timedelta(days=7), batch_size=10) == 25
    assert all(manager.get(i) is None for i in ids)
    assert session.scalar("select count(*) from jobkit.job_attempts where job_id = any(%s)", (ids,)) == 0
    assert manager.get(keep_pending) is not None and manager.get(recent) is not None


def test_sql_errors_are_clear(session: Session) -> None:
    import pytest
    from jobkit.exceptions import DatabaseError

    with pytest.raises(DatabaseError, match="p_payload must not be null"):
        session.execute("select jobkit.enqueue('t', null)")
    with pytest.raises(DatabaseError, match="p_lease must be at least 5 seconds"):
        session.execute("select * from jobkit.pick_jobs('t', 1, 'w', interval '0')")
    assert session.scalar("select count(*) from jobkit.jobs") == 0


def _expire(session: Session, job_id: UUID) -> None:
    session.execute(
        "update jobkit.jobs set lease_expires_at = now() - interval '1 second' where id = %s", (job_id,))


def _make_due(session: Session, job_id: UUID) -> None:
    session.execute("update jobkit.jobs set scheduled_for = now() where id = %s", (job_id,))
