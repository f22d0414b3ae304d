"""`python -m bench.user_steps [--reps 7]`: what [user_api]'s current-step triggers add to job_steps.

With [user_api], jobkit_user.jobs shows each owned job's current step, kept by two statement-level
triggers on jobkit.job_steps (sql/user_api.sql: one call per statement, one primary-key probe of
jobkit_user.jobs per job in it). In a cluster of its own this inserts step records server-side (a
DO loop timed with clock_timestamp, rolled back): 300 statements of 16 records each (what group
commit gives a busy worker) and 1,600 statements of one record (an idle one), into a database
without [user_api], one with it whose jobs nobody owns, and one whose jobs a user owns; and, for
comparison, the same two with a per-row trigger instead (the design not taken). Prints the median
microseconds per record."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import psycopg

from .cluster import BenchCluster

LOOP = """
do $$ declare t0 timestamptz; ids uuid[]; begin
  ids := array(select id from jobkit.jobs order by id limit 1600);
  t0 := clock_timestamp();
  for i in 1..{statements} loop
    insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, result, started_at)
    select u.id, 'step' || i, 1, 1, 'completed', '{{"i": 1}}', now()
    from unnest(ids[((i - 1) * {size}) % 1600 + 1:((i - 1) * {size}) % 1600 + {size}]) u(id);
  end loop;
  perform set_config('bench.took', (extract(epoch from clock_timestamp() - t0) * 1e6)::text, true);
end $$"""
SHAPES = {"16 records a statement": (300, 16), "1 record a statement": (1600, 1)}
ROW_TRIGGER = """
drop trigger job_steps_user_added on jobkit.job_steps;
drop trigger job_steps_user_changed on jobkit.job_steps;
create function jobkit_user.sync_step() returns trigger language plpgsql security definer
set search_path = '' as $f$
begin
    update jobkit_user.jobs m set step = new.name, step_status = new.status, step_started_at = new.started_at,
        step_finished_at = new.finished_at, updated_at = pg_catalog.now()
    where m.id = new.job_id and (m.step_finished_at is null
           or (new.finished_at, new.started_at) >= (m.step_finished_at, m.step_started_at))
      and (m.step, m.step_status, m.step_started_at, m.step_finished_at)
          is distinct from (new.name, new.status, new.started_at, new.finished_at);
    return null;
end $f$;
create trigger job_steps_user_sync after insert or update on jobkit.job_steps
    for each row execute function jobkit_user.sync_step()"""
CASES = {  # name: (user api, owned, per-row trigger)
    "no [user_api]": (False, False, False),
    "[user_api], jobs not owned": (True, False, False),
    "[user_api], owned jobs": (True, True, False),
    "per-row trigger, not owned": (True, False, True),
    "per-row trigger, owned": (True, True, True),
}


def _prepare(cluster: BenchCluster, name: str, user_api: bool, owned: bool, per_row: bool) -> str:
    from jobkit.config import RateLimitConfig, Settings, UserApiConfig
    from jobkit.connector import Database
    from jobkit.jobs import NewJob
    from jobkit.lifecycle import Lifecycle
    from jobkit.schema.deploy import DeployOptions, deploy

    with cluster.admin() as admin:
        admin.execute_with_identifiers("drop database if exists {n} with (force)", n=name)
        admin.execute_with_identifiers("create database {n}", n=name)
    url = cluster.url(name)
    api = UserApiConfig(schema="jobkit_user", types=("export",), max_payload_bytes=200,
                        limit=RateLimitConfig(rate=1000, burst=1000)) if user_api else None
    deploy(Database(url), Settings(db_url=url, user_api=api), DeployOptions(schedules=False),
           echo=lambda _m: None)
    with Database(url).session() as s:
        Lifecycle(s).enqueue_many([NewJob("export", {}) for _ in range(1600)])
        if owned:
            s.execute("update jobkit.jobs set owner = 'user-1'")
    if per_row:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(ROW_TRIGGER)  # several statements, no parameters
    return url


def _loop_us(url: str, statements: int, size: int) -> float:
    """Microseconds per record of one timed loop, rolled back."""
    with psycopg.connect(url) as conn:
        conn.execute(LOOP.format(statements=statements, size=size).encode())
        row = conn.execute("select current_setting('bench.took')::float8").fetchone()
        conn.rollback()
    assert row is not None
    return float(row[0]) / (statements * size)


def measure(cluster: BenchCluster, reps: int) -> dict[tuple[str, str], list[float]]:
    urls = {case: _prepare(cluster, f"us_{i}", *flags) for i, (case, flags) in enumerate(CASES.items())}
    out: dict[tuple[str, str], list[float]] = {}
    for _ in range(reps):  # interleaved: the machine's load moves all cases alike
        for shape, (statements, size) in SHAPES.items():
            for case, url in urls.items():
                out.setdefault((shape, case), []).append(_loop_us(url, statements, size))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.user_steps")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with BenchCluster() as cluster:
        result = measure(cluster, args.reps)
    print(f"job_steps inserts, server time per record, median of {args.reps} interleaved runs:")
    for shape in SHAPES:
        base = statistics.median(result[(shape, "no [user_api]")])
        print(f"  {shape}:")
        for case in CASES:
            values: Any = result[(shape, case)]
            med = statistics.median(values)
            print(f"    {case:<28} {med:6.1f} us  (+{med - base:5.1f})  "
                  f"runs {min(values):.1f}..{max(values):.1f}")


if __name__ == "__main__":
    main()
