"""`python -m bench.dashboard [--jobs 1000000] [--no-write]`: the dashboard's page queries at a
million jobs.

Builds one database with ``--jobs`` jobs spread over the last day the way a busy installation has
them (92% completed, the rest pending, scheduled, running, failed, dead and cancelled, five types,
attempt history for every failure), then runs each page's named query (sql/queries/dashboard.sql,
as the dashboard does: no prepared statements, so each plan sees its values) seven times and
reports the median, and the indexes its plan uses (EXPLAIN): no page may read the jobs table
sequentially. Writes the table between the dashboard markers of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from jobkit.queries import queries
from psycopg.types.json import Jsonb

from .cluster import BenchCluster
from .report import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- dashboard:start -->", "<!-- dashboard:end -->"
RUNS = 7
NO_FILTER = {"type": None, "status": None, "since": None, "until": None, "worker": None, "error": None,
             "payload": None, "key": None}

# The rows, made in the database: i decides the state (per mille), the type and the payload.
FILL = """
insert into jobkit.jobs (type, payload, status, attempts, max_attempts, last_error, result, scheduled_for,
                         started_at, completed_at, created_at, lease_expires_at, worker_id, updated_at)
select 'type_' || (i %% 5), jsonb_build_object('user_id', i %% 50000, 'order', i),
       s.status,
       case when s.status in ('pending', 'cancelled') then 0
            when s.status in ('failed', 'dead') then 3 else 1 end,
       null,
       case when s.status in ('failed', 'dead') then 'Traceback (most recent call last):' || chr(10)
            || '  File "app/jobs.py", line 42' || chr(10) || 'TimeoutError: upstream ' || (i %% 97) end,
       case when s.status = 'completed' then jsonb_build_object('ok', true) end,
       case when s.status = 'scheduled' then now() + interval '1 hour' else c.at end,
       case when s.status in ('completed', 'failed', 'dead', 'processing') then c.at + interval '50 ms' end,
       case when s.status in ('completed', 'failed', 'dead', 'cancelled')
            then c.at + interval '50 ms' + (i %% 200) * interval '1 ms' end,
       c.at,
       case when s.status = 'processing' then now() + interval '5 minutes' end,
       case when s.status <> 'pending' and s.status <> 'cancelled' then 'worker-' || (i %% 8) end,
       now()
from generate_series(1, %(n)s) i,
     lateral (select now() - interval '1 day' * (1 - i::float8 / %(n)s) as at) c,
     lateral (select case when i %% 1000 < 20 then 'pending' when i %% 1000 < 30 then 'scheduled'
                          when i %% 1000 < 31 then 'processing' when i %% 1000 < 36 then 'failed'
                          when i %% 1000 < 41 then 'dead' when i %% 1000 < 50 then 'cancelled'
                          else 'completed' end as status) s0,
     lateral (select case when s0.status = 'scheduled' then 'pending' else s0.status end as status,
                     s0.status as label) s
"""
ATTEMPTS = """
insert into jobkit.job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error)
select j.id, a, j.worker_id, j.started_at - interval '1 minute' * (3 - a),
       j.started_at - interval '1 minute' * (3 - a) + interval '80 ms',
       case when a < 3 or j.status = 'completed' then 'retry' else 'failed' end,
       'TimeoutError: upstream'
from jobkit.jobs j, generate_series(1, 3) a
where j.status in ('failed', 'dead')
   or (j.status = 'completed' and a = 1 and (j.payload ->> 'order')::int %% 20 = 0)
"""


@dataclass
class Case:
    page: str
    query: str
    label: str
    params: dict[str, Any]
    # May read a big table whole: the one-day charts count every job finished that day (when the
    # table holds little more than that day, that is the right plan), and payload search without
    # its optional index walks jobs newest first.
    may_scan: bool = False
    planned: bool = True  # False: the query is an EXPLAIN itself (its plan is not asked for)


def cases(conn: psycopg.Connection[Any]) -> Iterator[Case]:
    some = conn.execute("select id, created_at from jobkit.jobs where status = 'dead' "
                        "order by created_at desc, id desc offset 40 limit 1").fetchone()
    assert some is not None
    page = {"before_at": None, "before_id": None, "limit": 50}
    for name in ("dash_pending", "dash_processing", "dash_stopped", "dash_finished_recent",
                 "dash_attempts_recent", "dash_durations", "dash_wakeups"):
        yield Case("overview", name, "per type", {})
    for window in ("1 hour", "1 day"):
        whole = window == "1 day"
        yield Case("overview", "dash_throughput", f"chart, {window}", {"window": window, "type": None}, whole)
        yield Case("overview", "dash_failures", f"chart, {window}", {"window": window, "type": None}, whole)
    yield from payload_cases(conn, "no payload index (the default)", may_scan=True)
    jobs = [
        ("no filter, first page", {}),
        ("status = dead", {"status": "dead"}),
        ("type + status = failed", {"type": "type_3", "status": "failed"}),
        ("error contains 'upstream 13'", {"error": "upstream 13", "status": "dead"}),
        ("created in a 10-minute range", {"since": "now() - 6 hours", "until": "now() - 5 hours 50 minutes"}),
        ("worker = worker-3", {"worker": "worker-3"}),
    ]
    for label, flt in jobs:
        yield Case("jobs", "dash_jobs_page", label, NO_FILTER | _times(conn, flt) | page)
    yield Case("jobs", "dash_jobs_page", "status = dead, a later page (keyset)",
               NO_FILTER | {"status": "dead"} | page | {"before_at": some[1], "before_id": some[0]})
    dead = NO_FILTER | {"status": "dead"}
    yield Case("actions", "dash_jobs_count", "count: status = dead", dead | {"states": ["dead"]})
    yield Case("actions", "dash_jobs_batch", "a batch of 500: status = dead",
               dead | {"states": ["dead"], "limit": 500, "after_at": None, "after_id": None})
    bound = {"bound": 10_001}  # data.BOUND + 1: exact up to 10,000 jobs, estimated beyond
    yield Case("state bar", "dash_state_counts", "all types, 8 states", {"type": None} | bound)
    # One type: its completed jobs are jobs_finished_idx read newest first and filtered by type, so
    # when the type is a large share of a small table (a fifth of 20,000 here) reading the table
    # costs the planner about the same, and it may choose either.
    yield Case("state bar", "dash_state_counts", "type = type_3", {"type": "type_3"} | bound,
               may_scan=True)
    yield Case("state bar", "dash_state_estimates", "beyond the bound: pg_stats",
               {"schema": "jobkit", "type": None})
    # No filter: any 10,001 rows answer it, so a sequential read that stops at the bound is the plan.
    yield Case("jobs total", "dash_filter_count", "no filter (to the bound)", NO_FILTER | bound,
               may_scan=True)
    yield Case("jobs total", "dash_filter_count", "status = dead (to the bound)", dead | bound)
    yield Case("jobs total", "dash_filter_estimate", "no filter: EXPLAIN's estimate", NO_FILTER,
               planned=False)
    yield Case("actions", "ops_jobs_sample", "confirm sample: status = dead",
               dead | {"states": ["dead"], "limit": 10})
    # Reads the last day's finished jobs once, as the one-day chart does (may scan when the table
    # holds little more than that day).
    yield Case("overview", "dash_types_recent", "stale types: 5 candidates",
               {"types": [f"type_{i}" for i in range(5)]}, may_scan=True)
    yield Case("job", "get", "by id", {"id": some[0]})
    yield Case("job", "history", "history", {"id": some[0]})
    yield Case("rate limits", "dash_snoozes", "last hour", {})


def payload_cases(conn: psycopg.Connection[Any], note: str, may_scan: bool = False) -> Iterator[Case]:
    page = {"before_at": None, "before_id": None, "limit": 50}
    user = {"payload": Jsonb({"user_id": 4242})}
    yield Case("jobs", "dash_jobs_page", f'payload @> {{"user_id": 4242}}, {note}', NO_FILTER | user | page,
               may_scan)
    yield Case("jobs", "dash_jobs_page", f"payload + status = dead, {note}",
               NO_FILTER | user | {"status": "dead"} | page, may_scan)
    yield Case("actions", "dash_jobs_count", f"count: payload, {note}",
               NO_FILTER | user | {"states": ["failed", "dead", "cancelled"]}, may_scan)


def _times(conn: psycopg.Connection[Any], flt: dict[str, Any]) -> dict[str, Any]:
    """'now() - 6 hours' style bounds, evaluated once in the database."""
    out = dict(flt)
    for key in ("since", "until"):
        if key in out:
            out[key] = conn.execute("select now() - %s::interval",
                                    (out[key].removeprefix("now() - "),)).fetchone()[0]  # type: ignore[index]
    return out


def measure(conn: psycopg.Connection[Any], case: Case) -> dict[str, Any]:
    sql = queries("jobkit")[case.query]
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        conn.execute(sql, case.params).fetchall()  # type: ignore[arg-type]
        times.append((time.perf_counter() - t) * 1000)
    if not case.planned:
        return {"ms": statistics.median(times), "indexes": [], "seq": []}
    plan = conn.execute("explain (format json) " + sql, case.params).fetchone()[0]  # type: ignore[index, operator]
    nodes = list(_nodes(plan[0]["Plan"]))
    indexes = sorted({n["Index Name"] for n in nodes if "Index Name" in n})
    seq = sorted({n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan"})
    return {"ms": statistics.median(times), "indexes": indexes, "seq": seq}


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def build(url: str, n: int, echo: Any = print) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute(FILL, {"n": n})  # type: ignore[arg-type]
        conn.execute(ATTEMPTS, {})  # type: ignore[arg-type]
        conn.execute("vacuum analyze jobkit.jobs")
        conn.execute("vacuum analyze jobkit.job_attempts")
        counts = dict(conn.execute("select status, count(*) from jobkit.jobs group by 1").fetchall())
        attempts = conn.execute("select count(*) from jobkit.job_attempts").fetchone()
        echo(f"built {n:,} jobs {counts} and {attempts[0] if attempts else 0:,} attempts "
             f"in {time.perf_counter() - t:.0f} s")


def run(url: str, n: int, echo: Any = print) -> list[tuple[Case, dict[str, Any]]]:
    build(url, n, echo)
    # As the dashboard's SessionPool connects: no prepared statements, JIT off.
    with psycopg.connect(url, autocommit=True, prepare_threshold=None, options="-c jit=off") as conn:
        # The jobs page's keyset index is opt-in since issue 23 ([dashboard] created_index = true,
        # which a dashboard over a big table wants): measured with it.
        conn.execute(queries("jobkit")["created_index_create"])
        conn.execute("analyze jobkit.jobs")
        found = [(case, measure(conn, case)) for case in cases(conn)]
        t = time.perf_counter()
        conn.execute(queries("jobkit")["payload_index_create"])  # [dashboard] payload_index = true
        conn.execute("analyze jobkit.jobs")
        echo(f"payload index built in {time.perf_counter() - t:.0f} s")
        return found + [(c, measure(conn, c)) for c in payload_cases(conn, "payload_index = true")]


def ok(found: list[tuple[Case, dict[str, Any]]]) -> bool:
    """No plan reads the big tables sequentially (but the one-day charts and unindexed payload
    search may)."""
    return not any({"jobs", "job_attempts"} & set(m["seq"]) for c, m in found if not c.may_scan)


def table(found: list[tuple[Case, dict[str, Any]]], n: int, meta: str) -> str:
    size = f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n:,}"
    lines = [START, f"### Dashboard queries at {size} jobs", "",
             f"`python -m bench.dashboard --jobs {n}` ({meta}): each page's named query from",
             "`sql/queries/dashboard.sql`, run as the dashboard runs it (no prepared statements, JIT off), "
             "median of "
             f"{RUNS} runs, with the indexes its plan (EXPLAIN) uses.", "",
             "| page | query | case | median ms | indexes (EXPLAIN) | seq scans |",
             "|---|---|---|---:|---|---|"]
    for case, m in found:
        lines.append(f"| {case.page} | `{case.query}` | {case.label} | {m['ms']:.1f} | "
                     f"{', '.join(m['indexes']) or '-'} | {', '.join(m['seq']) or '-'} |")
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    with BenchCluster() as cluster, cluster.database("jobkit") as url:
        found = run(url, args.jobs)
        text = table(found, args.jobs, f"PostgreSQL {cluster.server_version()}, fsync on, "
                                       f"{os.cpu_count()} cores")
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "BENCHMARKS.md", START, END, text)
    return 0 if ok(found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
