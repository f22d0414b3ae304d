"""`python -m bench.claim_loops [--n 20000] [--rounds 3] [--claimers 1,2] [--shapes ...]`: the working
tree's drain with each number of claim loops (``Drainer(claimers=K)``), alternating on one cluster,
and what its claims did in the server.

Shapes: ``fixed`` (baseline_driver's fixed window: concurrency 16, batch 100, prefetch 25, a pool
of 4), ``defaults`` (``Drainer(concurrency=16)``, a pool of 8 as `worker serve` opens), and
``fair``/``fair_defaults`` (the same two drains of a fair type whose jobs are spread over 50
concurrency keys, bench/keys.py's shape). ``--claimers`` values: a number, or ``auto`` (the
Drainer's own default). Each drain gets a fresh database filled with ``n`` due jobs; pg_stat_statements
and the statistics counters are reset before it, read after it. Reported per shape and value:
jobs/s (median, min-max; wall-clock, noisy: the load average is printed), and, counted by the
server: claim calls and their shared buffers per call, and the entries the claim index scans
returned per drained job (pg_stat_user_indexes.idx_tup_read of jobs_claim_idx, or of
jobs_key_claim_idx for the fair shapes), split into entries whose row the scan's snapshot saw
(idx_tup_fetch: the jobs it claimed, and rows another claim held, skipped locked) and entries of
dead rows (claimed or completed before the scan's snapshot, their entries not yet marked killed:
a scan marks an entry killed only when its row is dead to every running transaction). A median
of the medians is what the summary table shows. ``--rtt MS`` drains through bench/delay_proxy.py:
a database that many milliseconds a round trip away."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from datetime import timedelta
from typing import Any

import psycopg
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

from . import jk, keys, verify
from .cluster import BenchCluster, install_jobkit
from .common import JOB_TYPE, median
from .delay_proxy import DelayProxy
from .verify import Tally

SHAPES: dict[str, tuple[bool, dict[str, Any], int]] = {  # name: (fair, Drainer options, pool size)
    "fixed": (False, {"concurrency": 16, "batch_size": 100, "prefetch": 25}, 4),
    "defaults": (False, {"concurrency": 16}, 8),
    "fair": (True, {"concurrency": 16, "batch_size": 100, "prefetch": 25}, 4),
    "fair_defaults": (True, {"concurrency": 16}, 8),
}
KEYS = 50

CLAIMS = """
select coalesce(sum(s.calls), 0), coalesce(sum(s.rows), 0),
       coalesce(sum(s.shared_blks_hit + s.shared_blks_read), 0), coalesce(sum(s.total_exec_time), 0)
from pg_stat_statements s join pg_database d on d.oid = s.dbid
where d.datname = current_database() and s.toplevel and s.query like '%%claim_jobs%%'
"""
INDEX = """
select coalesce(sum(idx_tup_read) filter (where indexrelname = 'jobs_claim_idx'), 0),
       coalesce(sum(idx_tup_fetch) filter (where indexrelname = 'jobs_claim_idx'), 0),
       coalesce(sum(idx_tup_read) filter (where indexrelname = 'jobs_key_claim_idx'), 0),
       coalesce(sum(idx_tup_fetch) filter (where indexrelname = 'jobs_key_claim_idx'), 0)
from pg_stat_user_indexes where schemaname = 'jobkit'
"""


async def _drain(url: str, options: dict[str, Any], pool: int, claimers: int | None,
                 tally: Tally) -> tuple[float, int]:
    """Seconds from the first handler call to the drain's end, and how many claim loops it ran."""
    backend = PostgresBackend(url, max_size=pool)
    await backend.open()
    try:
        extra = {} if claimers is None else {"claimers": claimers}
        drainer = Drainer(jk.registry(tally), backend, **options, **extra)
        await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
        end = time.monotonic()
        await drainer.shutdown(grace=timedelta(0))
        return tally.since_first(end), drainer.claim_loops.get(JOB_TYPE, 1)
    finally:
        await backend.close()


def _fill(url: str, n: int, fair: bool) -> None:
    if fair:
        keys.make_fair(url)
        keys.fill(url, n, KEYS)
    else:
        jk.fill(url, n)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("vacuum (analyze) jobkit.jobs")  # as keys.fill: the same start for both shapes


def _counters(conn: psycopg.Connection[Any]) -> tuple[float, ...]:
    time.sleep(1.2)  # the drain's backends have closed; their statistics reach the shared counters
    conn.execute("select pg_stat_clear_snapshot()")
    claims = conn.execute(CLAIMS).fetchone()
    idx = conn.execute(INDEX).fetchone()
    assert claims is not None and idx is not None
    return (*map(float, claims), *map(float, idx))


def measure(cluster: BenchCluster, shape: str, n: int, claimers: int | None,
            rtt: float = 0.0) -> dict[str, Any]:
    fair, options, pool = SHAPES[shape]
    with cluster.database("jobkit") as url, contextlib.ExitStack() as stack:
        drain_url = url
        if rtt:
            proxy = stack.enter_context(DelayProxy(cluster.port, rtt))
            drain_url = url.replace(f":{cluster.port}/", f":{proxy.port}/")
        _fill(url, n, fair)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("create extension if not exists pg_stat_statements")
            conn.execute("select pg_stat_statements_reset(), pg_stat_reset()")
            before = _counters(conn)
            tally = Tally()
            elapsed, loops = asyncio.run(_drain(drain_url, options, pool, claimers, tally))
            after = _counters(conn)
        ok = verify.jobkit(url, n, tally).ok
    calls, rows, bufs, ms, idx, fetched, key_idx, key_fetched = (
        a - b for a, b in zip(after, before, strict=True))
    return {"rate": n / elapsed, "ok": ok, "loops": loops, "calls": calls * 1000 / n,
            "rows_per_call": rows / max(calls, 1),
            "bufs_per_call": bufs / max(calls, 1), "ms_per_call": ms / max(calls, 1),
            # entries read a job: to rows still visible (claimed, or skipped locked) and to dead ones
            "idx_per_job": (idx + key_idx) / n, "live_per_job": (fetched + key_fetched) / n,
            "dead_per_job": (idx + key_idx - fetched - key_fetched) / n}


def _value(text: str) -> int | None:
    return None if text == "auto" else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.claim_loops")
    ap.add_argument("--n", type=int, default=20000, help="jobs per drain")
    ap.add_argument("--rounds", type=int, default=3, help="drains per shape and value, alternating")
    ap.add_argument("--claimers", default="1,2", help="comma-separated: numbers, or auto (the default)")
    ap.add_argument("--shapes", default="fixed,defaults,fair,fair_defaults", help=", ".join(SHAPES))
    ap.add_argument("--rtt", type=float, default=0.0,
                    help="milliseconds a round trip between the drain and the server (bench/delay_proxy.py)")
    args = ap.parse_args()
    values = [_value(v) for v in args.claimers.split(",")]
    shapes = args.shapes.split(",")
    extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    results: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    with BenchCluster(echo=lambda _s: None, extra=extra).start() as cluster:
        cluster.register("jobkit", install_jobkit)
        for r in range(args.rounds):
            for shape in shapes:
                for v in (values if r % 2 == 0 else values[::-1]):
                    res = measure(cluster, shape, args.n, v, args.rtt / 1000)
                    results.setdefault((shape, v), []).append(res)
                    print(f"  round {r + 1} {shape:14} claimers={v or 'auto':<4} {res['rate']:>8,.0f} jobs/s "
                          f"{'ok' if res['ok'] else 'NOT OK'}, {res['loops']} loop(s); "
                          f"claims/1k jobs {res['calls']:.2f}, "
                          f"{res['rows_per_call']:.1f} jobs, {res['bufs_per_call']:.0f} buffers, "
                          f"{res['ms_per_call']:.2f} ms a claim; index entries read a job "
                          f"{res['idx_per_job']:.2f}: live {res['live_per_job']:.2f}, dead "
                          f"{res['dead_per_job']:.2f}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    _summary(results)


def _summary(results: dict[tuple[str, int | None], list[dict[str, Any]]]) -> None:
    print("\n| shape | claimers | loops run | jobs/s: median (min-max) | buffers a claim | claim ms (server) "
          "| claim-index entries a job | of which live (claimed, skipped locked) | dead, not yet killed |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for (shape, v), runs in results.items():
        rates = [r["rate"] for r in runs]
        loops = "/".join(str(r["loops"]) for r in runs)
        print(f"| {shape} | {v or 'auto'} | {loops} "
              f"| {median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) "
              f"| {median([r['bufs_per_call'] for r in runs]):,.0f} "
              f"| {median([r['ms_per_call'] for r in runs]):.2f} "
              f"| {median([r['idx_per_job'] for r in runs]):.2f} "
              f"| {median([r['live_per_job'] for r in runs]):.2f} "
              f"| {median([r['dead_per_job'] for r in runs]):.2f} |")


if __name__ == "__main__":
    main()
