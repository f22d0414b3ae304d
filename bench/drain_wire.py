"""`python -m bench.drain_wire [--ref REF ...] [--n 20000] [--top 25]`: what each side's fixed-window
drain sends the server, per 1,000 drained jobs, counted by the server itself.

One cluster (bench.cluster's settings, fsync on) with pg_stat_statements preloaded. Each side
(the working tree, then each ``--ref`` built as `--baseline` builds it) is deployed with its own
`jobkit deploy`; in a fresh database its jobs are put in with its own ``enqueue_many`` and analyzed
(bench/baseline_driver.py's fill), then pg_stat_statements is reset, the WAL position and the
database's transaction counters read, and the side drains with baseline_driver's fixed window
(``Drainer(concurrency=16, batch_size=100, prefetch=25)`` on a pool of 4) in its own interpreter.
Reported: every statement with its calls, rows, and execution + planning milliseconds per 1,000
jobs; WAL bytes per job; commits and rollbacks per 1,000 jobs (pg_stat_database). Times are
wall-clock inside the server (noisy); calls, rows, commits and WAL are not."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo

from .baseline import installer
from .baseline_venv import DRIVER, Side, add_ref_option, measured_sides
from .cluster import BenchCluster

#: Run in the side's interpreter: fill, then (after the parent's reset) drain; print the timing.
CHILD = """
import asyncio, json, os, sys, time
sys.path.insert(0, {bench!r})
import baseline_driver as d
if os.environ.get("JK_BENCH_CLAIMERS"):  # --claimers: a Drainer option of the working tree only
    d.FIXED["claimers"] = int(os.environ["JK_BENCH_CLAIMERS"])
url, n, phase = sys.argv[1], int(sys.argv[2]), sys.argv[3]
FAIR = '''insert into jobkit.job_types (type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap,
                                    backoff_jitter, fair)
          select 'bench.noop', max_attempts, lease, backoff_base, backoff_factor, backoff_cap,
                 backoff_jitter, true
          from jobkit.job_types where type = '*' on conflict (type) do update set fair = true'''
if phase == "fill":
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        d._fill(conn, n)
        if os.environ.get("JK_BENCH_KEYS"):  # --keys: a fair type, its jobs over that many keys
            conn.execute(FAIR)
            conn.execute("update jobkit.jobs set concurrency_key = 'k' || ((payload->>'i')::int %% %s) "
                         "where status = 'pending'", (int(os.environ["JK_BENCH_KEYS"]),))
            conn.execute("vacuum jobkit.jobs")
        conn.execute("analyze jobkit.jobs")
else:
    seen, first = [], []
    elapsed = asyncio.run(d._drain(url, True, seen, first))
    print(json.dumps({{"seen": len(seen), "distinct": len(set(seen)), "rate": n / elapsed}}))
"""

STATS = """
select s.query, s.calls, s.plans, s.rows, s.total_exec_time, s.total_plan_time
from pg_stat_statements s join pg_database d on d.oid = s.dbid
where d.datname = current_database() and s.query not like '%%pg_stat%%'
  and s.query not like '%%pg_current_wal%%'
"""

XACT = "select xact_commit, xact_rollback from pg_stat_database where datname = current_database()"


def _child(side: Side, url: str, n: int, phase: str, claimers: int | None = None, keys: int = 0) -> str:
    code = CHILD.format(bench=str(DRIVER.parent))
    env = {**os.environ, "JK_BENCH_CLAIMERS": str(claimers or ""), "JK_BENCH_KEYS": str(keys or "")}
    done = subprocess.run([str(side.python), "-I", "-c", code, url, str(n), phase],
                          capture_output=True, text=True, check=True, env=env)
    return done.stdout


WAITS = """
select coalesce(wait_event_type || ':' || wait_event, 'CPU') from pg_stat_activity
where datname = %s and state <> 'idle' and backend_type = 'client backend'
"""


def _sample(url: str, stop: threading.Event, seen: Counter[str]) -> None:
    """What the side's busy backends wait on, every 2 ms (idle ones are waiting for the worker),
    sampled from another database (its transactions are not the side's)."""
    db = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(psycopg.conninfo.make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("select pg_stat_clear_snapshot()")
            seen["samples"] += 1
            for (what,) in conn.execute(WAITS, (db,)).fetchall():
                seen[what] += 1
            time.sleep(0.002)


def _counters(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    time.sleep(1.5)  # backends flush their transaction counters at most once a second when idle
    conn.execute("select pg_stat_clear_snapshot()")
    lsn = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    xact = conn.execute(XACT).fetchone()
    assert lsn is not None and xact is not None
    return int(lsn[0]), int(xact[0]), int(xact[1])


def _short(query: str) -> str:
    text = re.sub(r"\s+", " ", query).strip()
    return text[:110]


def measure(cluster: BenchCluster, side: Side, key: str, n: int, claimers: int | None,
            keys: int = 0) -> dict[str, Any]:
    with cluster.database(key) as url:
        _child(side, url, n, "fill", keys=keys)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("create extension if not exists pg_stat_statements")
            conn.execute("select pg_stat_statements_reset()")
            before = _counters(conn)
            stop, waits = threading.Event(), Counter[str]()
            sampler = threading.Thread(target=_sample, args=(url, stop, waits))
            sampler.start()
            try:
                out = json.loads(_child(side, url, n, "drain", claimers).strip().splitlines()[-1])
            finally:
                stop.set()
                sampler.join()
            after = _counters(conn)
            stmts = conn.execute(STATS).fetchall()
            left = conn.execute("select count(*) from jobkit.jobs where status <> 'completed'").fetchone()
    per = 1000 / n
    return {
        "side": side.label, "rate": out["rate"], "ok": out["seen"] == n == out["distinct"] and left == (0,),
        "wal_per_job": (after[0] - before[0]) / n,
        "commits": (after[1] - before[1]) * per, "rollbacks": (after[2] - before[2]) * per,
        "waits": {k: v / max(waits["samples"], 1) for k, v in waits.most_common() if k != "samples"},
        "stmts": sorted(((_short(q), c * per, pl * per, r * per, (e + p) * per)
                         for q, c, pl, r, e, p in stmts), key=lambda s: -s[4]),
    }


def report(res: dict[str, Any], top: int) -> None:
    print(f"\n== {res['side']}: {res['rate']:,.0f} jobs/s ({'ok' if res['ok'] else 'NOT ALL DRAINED ONCE'}); "
          f"WAL {res['wal_per_job']:,.0f} bytes/job; per 1,000 jobs: {res['commits']:,.1f} commits, "
          f"{res['rollbacks']:,.1f} rollbacks (the monitor's own few included)")
    calls = sum(s[1] for s in res["stmts"])
    print(f"   statements per 1,000 jobs: {calls:,.1f} calls")
    print("   busy backends per sample, by wait (CPU: none): "
          + ", ".join(f"{k} {v:.2f}" for k, v in list(res["waits"].items())[:8]))
    print(f"   {'calls':>8} {'plans':>8} {'rows':>9} {'ms':>8}  query")
    for q, c, pl, r, t in res["stmts"][:top]:
        print(f"   {c:>8.2f} {pl:>8.2f} {r:>9.1f} {t:>8.2f}  {q}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.drain_wire")
    add_ref_option(ap)
    ap.add_argument("--n", type=int, default=20000, help="jobs per drain")
    ap.add_argument("--rounds", type=int, default=1, help="measure each side this many times, alternating")
    ap.add_argument("--top", type=int, default=25, help="statements listed per side")
    ap.add_argument("--nested", action="store_true",
                    help="pg_stat_statements.track = all (the statements inside functions too: their time is "
                         "also in the calling statement's) and track_planning = on (plans: how many times "
                         "each statement was planned; a cached generic plan is not counted)")
    ap.add_argument("--claimers", type=int, default=None,
                    help="the working tree's Drainer(claimers=K) (default: its default; not for --ref sides)")
    ap.add_argument("--keys", type=int, default=0,
                    help="the working tree's jobs over K concurrency keys of a fair type (bench/keys.py)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    sides = measured_sides(args.ref)
    extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
    results = []
    with BenchCluster(echo=lambda _s: None, extra=extra).start() as cluster:
        if args.nested:
            cluster.reload_setting("pg_stat_statements.track", "all")
            cluster.reload_setting("pg_stat_statements.track_planning", "on")
        for i, side in enumerate(sides):
            cluster.register(f"side{i}", installer(side))
        for _ in range(args.rounds):
            for i, side in enumerate(sides):
                res = measure(cluster, side, f"side{i}", args.n, args.claimers if i == 0 else None,
                              args.keys if i == 0 else 0)
                report(res, args.top)
                results.append(res)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
