"""`python -m bench.enqueue_stats [--ref REF] [--calls 40] [--rounds 2]`: where a bulk enqueue's
wall-clock goes, client against server: each side's own ``jobkit.enqueue_many`` (run by its own
Python, 1,000 ``{"i": i}`` jobs a call on one autocommit connection, as bench/baseline_driver.py's
bulk) in a fresh database of one cluster with pg_stat_statements (track = all, track_io_timing),
sides alternating. Per side: the client's wall time per call (perf_counter around the call), the
server's execution and planning time of the top-level statement, WAL bytes and buffers per call,
and the nested statements (the function's insert, the wake trigger's queries). Wall-clock figures:
quote the load average with them."""

from __future__ import annotations

import argparse
import json
import subprocess
from typing import Any

from .baseline_venv import Side, add_ref_option, measured_sides
from .cluster import BenchCluster

#: Run by the side's own interpreter: prints the seconds each call took, as JSON.
CLIENT = """
import json, sys, time, psycopg, jobkit
url, calls = sys.argv[1], int(sys.argv[2])
took = []
with psycopg.connect(url, autocommit=True) as conn:
    for c in range(calls):
        jobs = [jobkit.NewJob("bench.noop", {"i": i}) for i in range(c * 1000, c * 1000 + 1000)]
        t = time.perf_counter()
        jobkit.enqueue_many(conn, jobs)
        took.append(time.perf_counter() - t)
print(json.dumps(took))
"""

STATS = """
select toplevel, calls, rows, total_exec_time, total_plan_time, wal_bytes,
       shared_blks_hit + shared_blks_read + shared_blks_dirtied as blks,
       blk_read_time + blk_write_time as io_ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
from pg_stat_statements where dbid = (select oid from pg_database where datname = %s)
order by total_exec_time desc limit %s
"""


def _side(cluster: BenchCluster, side: Side, args: argparse.Namespace, db: str) -> None:
    with cluster.admin() as s:
        s.execute(f'create database "{db}"')  # noqa: S608 - a fixed, generated name
    url = cluster.url(db)
    subprocess.run(side.deploy(url), check=True, capture_output=True)
    with cluster.admin() as s:
        s.execute("select pg_stat_statements_reset()")
    done = subprocess.run([str(side.python), "-I", "-c", CLIENT, url, str(args.calls)],
                          capture_output=True, text=True, check=True)
    calls = json.loads(done.stdout)
    took = sorted(calls[2:])  # the first two apart: the process's first call, the plans
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        rows = conn.execute(STATS, (db, args.top)).fetchall()
    print(f"\n## {side.label} ({db}): client wall per call: median {took[len(took) // 2] * 1e3:.2f} ms, "
          f"min {took[0] * 1e3:.2f} ms ({len(took)} calls); the first two calls {calls[0] * 1e3:.2f} and "
          f"{calls[1] * 1e3:.2f} ms")
    print("| top | calls | rows | exec ms/call | plan ms/call | WAL B/call | blocks/call | io ms "
          "| statement |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for top, calls, nrows, exe, plan, wal, blks, io, q in rows:
        print(f"| {'y' if top else ''} | {calls} | {nrows} | {exe / calls:.3f} | {plan / calls:.3f} | "
              f"{int(wal) / calls:,.0f} | {blks / calls:,.0f} | {io:.1f} | {q.replace('|', '/')} |")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.enqueue_stats")
    add_ref_option(ap, "this commit's enqueue_many")
    ap.add_argument("--calls", type=int, default=40, help="calls of 1,000 jobs per side")
    ap.add_argument("--rounds", type=int, default=2, help="sides alternate this many times")
    ap.add_argument("--top", type=int, default=8, help="statements listed per side")
    args = ap.parse_args()
    extra: dict[str, Any] = {"shared_preload_libraries": "pg_cron,pg_stat_statements",
                             "track_io_timing": "on"}
    sides = measured_sides(args.ref)
    with BenchCluster(extra=extra) as cluster:
        with cluster.admin() as s:
            s.execute("create extension if not exists pg_stat_statements")
            s.execute("alter system set pg_stat_statements.track = 'all'")
            s.execute("select pg_reload_conf()")
        for r in range(args.rounds):
            for i, side in enumerate(sides if r % 2 == 0 else sides[::-1]):
                _side(cluster, side, args, f"es_{r}_{i}")


if __name__ == "__main__":
    main()
