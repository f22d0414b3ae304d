"""Exactly-once claims and idempotent enqueues under real concurrency (separate connections)."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from datetime import timedelta
from uuid import UUID

from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle

TYPES = ("alpha", "beta", "gamma")
PRIORITIES = (0, 1, 2)
WORKERS = 8
TOTAL = 20_000


def test_eight_workers_process_twenty_thousand_jobs_exactly_once(db: Database) -> None:
    with db.session() as s:
        manager = Lifecycle(s, "jobkit")
        jobs = [NewJob(TYPES[i % 3], {"i": i}, priority=PRIORITIES[(i // 3) % 3]) for i in range(TOTAL)]
        for start in range(0, TOTAL, 5000):
            manager.enqueue_many(jobs[start:start + 5000])
        s.execute("analyze jobkit.jobs")
    claims: list[tuple[int, int, str, UUID, int]] = []  # (sent at, returned at, type, id, priority)
    lock = threading.Lock()
    sequence = itertools.count()
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with db.session() as s:
                m = Lifecycle(s, "jobkit")
                idle = 0
                while idle < len(TYPES):
                    idle = 0
                    for job_type in TYPES:
                        with lock:
                            sent = next(sequence)
                        batch = m.claim(job_type, 50, name, timedelta(minutes=5))
                        with lock:
                            returned = next(sequence)
                            claims.extend((sent, returned, job_type, j.id, j.priority) for j in batch)
                        if not batch:
                            idle += 1
                            continue
                        accepted = m.complete([(j.id, j.attempts, json.dumps({"by": name})) for j in batch])
                        assert accepted == {j.id for j in batch}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    claimed = Counter(c[3] for c in claims)
    assert len(claimed) == TOTAL and set(claimed.values()) == {1}
    with db.session() as s:
        rows = s.all("select status, count(*) as n, min(attempts) as lo, max(attempts) as hi "
                     "from jobkit.jobs group by status")
        assert rows == [{"status": "completed", "n": TOTAL, "lo": 1, "hi": 1}]
        per_job = s.all("select job_id, count(*) as n from jobkit.job_history group by job_id "
                        "having count(*) <> 1 or bool_or(outcome <> 'completed')")
        assert per_job == []
        assert s.scalar("select count(*) from jobkit.job_history") == TOTAL
        assert s.scalar("select count(*) from jobkit.job_attempts") == 0  # no attempt failed or expired
    _assert_priority_order(claims)


def _assert_priority_order(claims: list[tuple[int, int, str, UUID, int]]) -> None:
    """Within a type, no claim sent after a claim of lower-priority jobs had returned finds a
    higher-priority job: by then every such job was claimed or locked by a claim in flight (which
    claims it). Sequence numbers are taken under one lock just before sending and just after the
    return, so they order those moments in real time whatever the threads' scheduling."""
    for job_type in TYPES:
        mine = [c for c in claims if c[2] == job_type]
        for high, low in itertools.combinations(sorted(PRIORITIES, reverse=True), 2):
            last_high_sent = max(c[0] for c in mine if c[4] == high)
            first_low_returned = min(c[1] for c in mine if c[4] == low)
            assert last_high_sent < first_low_returned, (job_type, high, low)


def test_concurrent_enqueues_with_one_key_create_one_job(db: Database) -> None:
    barrier = threading.Barrier(16)
    ids: list[UUID] = []
    lock = threading.Lock()

    def enqueue(n: int) -> None:
        with db.session() as s:
            manager = Lifecycle(s, "jobkit")
            barrier.wait()
            job_id = manager.enqueue(NewJob("charge", {"n": n}, idempotency_key="order-42"))
            with lock:
                ids.append(job_id)

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 16 and len(set(ids)) == 1
    with db.session() as s:
        assert s.scalar("select count(*) from jobkit.jobs where idempotency_key = 'order-42'") == 1


def test_concurrent_bulk_enqueues_with_shared_keys(db: Database) -> None:
    barrier = threading.Barrier(6)
    results: list[list[UUID]] = []
    lock = threading.Lock()

    def enqueue() -> None:
        with db.session() as s:
            manager = Lifecycle(s, "jobkit")
            barrier.wait()
            got = manager.enqueue_many([NewJob("t", {}, idempotency_key=f"k{i}") for i in range(200)])
            with lock:
                results.append(got)

    threads = [threading.Thread(target=enqueue) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == results[0] for r in results) and len(set(results[0])) == 200
    with db.session() as s:
        assert s.scalar("select count(*) from jobkit.jobs") == 200
