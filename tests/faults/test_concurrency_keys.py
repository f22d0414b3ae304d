"""Per-key concurrency limits across real worker processes: 8 workers, 2,500 jobs over 50 keys,
max_running_per_key = 2. A statement trigger logs, at every change of a job's status, how many
jobs of each key it touched are processing, and a sampler polls the whole table meanwhile; neither
may ever see more than 2. Every job completes exactly once, also when a worker is killed -9
midway (its jobs are held until their lease expires and the sweep hands them on). Every 50th
job fails its first attempt and is retried, so retries go through the limits too."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from fault_handlers import QUICK
from faultkit import FAULT_TYPES, Ticker, count, exactly_once
from jobkit.config import KeyTemplate, Settings, TypeConfig
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from poll import wait_for
from workers import Worker

JOBS, KEYS, PER_KEY, WORKERS = 2500, 50, 2, 8  # 50 jobs a key: 25 times its limit
KEYED = TypeConfig(max_attempts=3, backoff=QUICK, fair=True, max_running_per_key=PER_KEY,
                   concurrency_key=KeyTemplate.parse("tenant:{payload.tenant}", "test"))

# The log: after every statement that moves fault.keyed jobs into or out of processing, the
# number of processing jobs of each key it touched, as that statement's transaction sees them.
RUNNING_LOG = """
create table running_log (key text not null, running int not null, at timestamptz not null default clock_timestamp());
create function public.log_running() returns trigger language plpgsql set search_path = '' as $$
begin
    insert into public.running_log (key, running)
    select k.key, (select pg_catalog.count(*) from jobkit.jobs j
                   where j.type = 'fault.keyed' and j.concurrency_key = k.key and j.status = 'processing')
    from (select distinct n.concurrency_key as key from changed n where n.type = 'fault.keyed') k;
    return null;
end $$;
create trigger log_running after update on jobkit.jobs referencing new table as changed
    for each statement execute function public.log_running();
grant all on running_log to public;
"""


def _prepare(url: str) -> None:
    config = Settings(db_url=url, types={**FAULT_TYPES, "fault.keyed": KEYED})
    deploy(Database(url), config, DeployOptions(schedules=False), echo=lambda _m: None)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table if not exists side_effects (job_id uuid not null, attempt int not null,"
                     " pid int not null, at timestamptz not null default clock_timestamp())")
        conn.execute("grant all on side_effects to public")
        conn.execute(RUNNING_LOG)


@contextmanager
def _sampler(url: str) -> Iterator[list[int]]:
    """Polls the largest number of processing jobs of any one key until the block ends."""
    peaks: list[int] = []
    stop = threading.Event()

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(0.01):  # a sample every 10 ms
                row = conn.execute(
                    "select coalesce(max(n), 0) from (select count(*) as n from jobkit.jobs"
                    " where type = 'fault.keyed' and status = 'processing' group by concurrency_key) c").fetchone()
                peaks.append(int(row[0]) if row else 0)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        stop.set()
        thread.join(10)


def _enqueue(url: str) -> list:
    with Database(url).session() as session:
        return Lifecycle(session, "jobkit").enqueue_many(
            [NewJob("fault.keyed", {"tenant": i % KEYS, "seconds": 0.005, "fail_first": i % 50 == 0})
             for i in range(JOBS)])


def _log_peak(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute("select coalesce(max(running), 0), count(*) from running_log").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("fault", ["none", "kill -9"])
def test_per_key_limit_holds_across_eight_workers(
    fault_url: str, workers: Callable[..., Worker], fault: str
) -> None:
    url = fault_url
    _prepare(url)
    started = [workers(url, "--listen", "--concurrency", "16", healthy=False) for _ in range(WORKERS)]
    for w in started:
        wait_for(w.healthy, 30, "a worker did not start")
    in_flight = 0
    with _sampler(url) as peaks, Ticker(url):
        ids = _enqueue(url)
        if fault == "kill -9":
            in_flight = _kill_midway(url, started[0])
        took = wait_for(lambda: count(url, "status = 'completed'") == JOBS, 90, "every job completed")
    verdict = exactly_once(url, ids)
    verdict.report(f"8 workers, {JOBS} jobs over {KEYS} keys, max_running_per_key {PER_KEY} ({fault}, "
                   f"{in_flight} in flight at the kill): {took:.1f}s")
    logged, changes = _log_peak(url)
    print(f"[faults] running per key: log max {logged} over {changes} changes; sampler max "
          f"{max(peaks)} over {len(peaks)} samples; attempts that did not complete: {_outcomes(url)}")
    assert verdict.completed == JOBS
    retried, outcomes = _failed_first(url), _outcomes(url)
    # Each planned failure is retried once (unless the kill cut its first attempt off first).
    assert len(retried) == JOBS // 50
    assert JOBS // 50 - outcomes.get("lease_expired", 0) <= outcomes.get("retry", 0) <= JOBS // 50
    assert changes > JOBS and len(peaks) > 10
    assert logged == PER_KEY and max(peaks) <= PER_KEY  # reached, never exceeded
    if fault == "kill -9":  # the killed worker's jobs waited for their lease, then went on
        expired = _outcomes(url).get("lease_expired", 0)
        assert in_flight >= 1 and expired >= 1 and len(set(verdict.rerun) - retried) <= expired
    else:
        assert set(verdict.rerun) == retried  # only the planned failures ran twice


def _kill_midway(url: str, victim: Worker) -> int:
    """Once a quarter of the jobs completed: freeze the victim (SIGSTOP); if it holds jobs, kill -9
    it, else let it go on and try again. Returns how many jobs it held."""
    worker_id = victim.health()["worker"]
    held = 0

    def frozen_holding() -> bool:
        nonlocal held
        if count(url, "status = 'completed'") < JOBS // 4:
            return False
        victim.pause()
        held = _holding(url, worker_id)
        if held:
            victim.kill()
            return True
        victim.resume()
        return False

    wait_for(frozen_holding, 60, "the victim holding jobs midway")
    return held


def _holding(url: str, worker: str) -> int:
    """Jobs ``worker`` holds (claimed, running or waiting for a slot)."""
    return count(url, "status = 'processing' and worker_id = %s", (worker,))


def _failed_first(url: str) -> set[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {r[0] for r in conn.execute(
            "select id from jobkit.jobs where (payload ->> 'fail_first')::boolean").fetchall()}


def _outcomes(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("select outcome, count(*) from jobkit.job_attempts group by 1").fetchall())
