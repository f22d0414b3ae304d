"""`python -m bench.workers [--jobs 20000] [--rounds 3] [--page-jobs 1000000] [--no-write]`: what
worker presence (issue 27, 0021) costs.

1. **The hot path.** Per round, three fresh databases (fsync on), each with ``--jobs`` jobs
   bulk-enqueued and vacuumed, drained by one Drainer at a fixed window (concurrency 16, batch 100,
   prefetch 25) on the worker's pool, as `jobkit worker serve` runs it: with the heartbeat off, at
   the default 5 s, and at the shortest 1 s (presence.Presence on the same pool, writing the row
   of this worker with the jobs it holds). Variants interleaved, reversed every other round.
   Reported: drain jobs/s (first handler call to the last), WAL bytes per drained job, and the
   beats written during the drain.
2. **One heartbeat.** 500 beats in a row on one connection: the round trip and the WAL per beat,
   and so what one worker writes per hour at the default interval.
3. **The page queries at ``--page-jobs`` jobs** (bench.dashboard's build: 92% completed, 0.1%
   running, held by worker-0..worker-7), with those 8 workers alive and 200 gone rows: the
   /workers page's and `jobkit status`'s ``workers_list`` and ``workers_jobs``, and /metrics'
   ``worker_counts``, median of 7 runs as the dashboard runs them, with EXPLAIN's indexes and
   sequential scans (none of jobs may be one).

Writes the section between the workers markers of docs/BENCHMARKS.md (not with --no-write).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from jobkit.jobs import NewJob, WorkerInfo
from jobkit.lifecycle import Statements
from jobkit.queries import queries

from .cluster import BenchCluster, machine
from .common import scalar
from .dashboard import Case, build, measure
from .report import write_section
from .verify import Tally

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- workers:start -->", "<!-- workers:end -->"
JOB = "bench.worker"
VARIANTS: dict[str, float | None] = {"heartbeat off": None, "heartbeat 5s (default)": 5.0,
                                     "heartbeat 1s": 1.0}
BEATS = 500


def _lsn(url: str) -> int:
    return int(scalar(url, "select pg_current_wal_lsn() - '0/0'::pg_lsn"))


def _info(worker_id: str, every: float) -> WorkerInfo:
    return WorkerInfo(worker_id, "bench-host", os.getpid(), "bench", "pg_net", 16, (JOB,),
                      timedelta(seconds=every), datetime.now(UTC))


def fill(url: str, n: int) -> None:
    import jobkit

    with psycopg.connect(url, autocommit=True) as conn:
        for lo in range(0, n, 1000):
            jobkit.enqueue_many(conn, [NewJob(JOB, {"i": i}) for i in range(lo, min(n, lo + 1000))])
        conn.execute("vacuum analyze jobkit.jobs")


async def drain(url: str, n: int, every: float | None) -> dict[str, float]:
    from jobkit.handlers import Registry
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer
    from jobkit.worker.presence import Presence

    tally = Tally()
    registry = Registry()

    @registry.handler(JOB, timeout=60)
    async def handle(_payload: Any, ctx: Any) -> None:
        tally.hit(ctx.id)

    backend = PostgresBackend(url, max_size=8)  # as `worker serve --concurrency 16` sizes it
    await backend.open()
    beating: asyncio.Task[None] | None = None
    try:
        drainer = Drainer(registry, backend, concurrency=16, batch_size=100, prefetch=25)
        presence = None
        if every is not None:
            presence = Presence(backend, _info(drainer.worker_id, every), lambda: drainer.unfinished)
            beating = asyncio.create_task(presence.run())
            while presence.beats < 1:  # registered, as a worker is before its first wake-up
                await asyncio.sleep(0.01)
        before = _lsn(url)
        beats_before = presence.beats if presence else 0
        await drainer.drain(JOB, budget=timedelta(hours=1))
        end = time.monotonic()
        wal = _lsn(url) - before
        beats = (presence.beats if presence else 0) - beats_before
        await drainer.shutdown(grace=timedelta(0))
    finally:
        if beating is not None:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
        await backend.close()
    done = scalar(url, "select count(*) from jobkit.jobs where status = 'completed'")
    if done != n or tally.calls != n:
        raise SystemExit(f"{done} completed, {tally.calls} handler calls, expected {n}")
    return {"drain": n / tally.since_first(end), "wal": wal / n, "beats": beats}


def one_beat(url: str) -> dict[str, float]:
    statement = Statements("jobkit").worker_beat(_info("bench-beat", 5.0), 3)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement.sql, statement.params)  # the first one inserts the row
        before = _lsn(url)
        times = []
        for _ in range(BEATS):
            t = time.perf_counter()
            conn.execute(statement.sql, statement.params)
            times.append((time.perf_counter() - t) * 1000)
        wal = (_lsn(url) - before) / BEATS
    return {"ms": statistics.median(times), "wal": wal}


def page_queries(url: str, n: int) -> list[tuple[Case, dict[str, Any]]]:
    build(url, n)
    with psycopg.connect(url, autocommit=True, prepare_threshold=None, options="-c jit=off") as conn:
        beat = Statements("jobkit").worker_beat
        for i in range(8):
            s = beat(_info(f"worker-{i}", 5.0), 125)
            conn.execute(s.sql, s.params)
        for i in range(200):
            s = beat(_info(f"gone-{i}", 5.0), 0)
            conn.execute(s.sql, s.params)
            conn.execute("select jobkit.worker_gone(%s)", (f"gone-{i}",))
        conn.execute("analyze jobkit.workers")
        live = [f"worker-{i}" for i in range(8)]
        cases = [Case("workers", "workers_list", "8 alive + 200 gone", {"limit": 500}),
                 Case("workers", "workers_jobs", "the jobs 8 workers hold (1,000 running)",
                      {"ids": live, "limit": 2000}),
                 Case("metrics", "worker_counts", "by state", {})]
        found = [(c, measure(conn, c)) for c in cases]
        held = conn.execute(queries("jobkit")["workers_jobs"], {"ids": live, "limit": 2000}).fetchall()
        print(f"workers_jobs returned {len(held)} held jobs")
    return found


def run_rounds(cluster: BenchCluster, n: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    names = list(VARIANTS)
    for r in range(rounds):
        for v in (names if r % 2 == 0 else names[::-1]):
            with cluster.database("jobkit") as url:
                fill(url, n)
                got = asyncio.run(drain(url, n, VARIANTS[v]))
            results[v].append(got)
            print(f"round {r + 1} {v}: " + ", ".join(f"{k}={x:,.1f}" for k, x in got.items()), flush=True)
    return results


def report(results: dict[str, list[dict[str, float]]], beat: dict[str, float],
           pages: list[tuple[Case, dict[str, Any]]], meta: str, n: int, rounds: int, page_jobs: int) -> str:
    def med(v: str, key: str) -> float:
        return statistics.median(r[key] for r in results[v])

    def spread(v: str, key: str) -> str:
        values = [r[key] for r in results[v]]
        return f"{min(values):,.0f}-{max(values):,.0f}"

    off = "heartbeat off"
    lines = [START, "### Issue 27: what worker presence costs", "",
             f"`python -m bench.workers --jobs {n} --rounds {rounds} --page-jobs {page_jobs}` ({meta}). "
             f"Each variant drains {n:,} bulk-enqueued jobs with one Drainer at a fixed window "
             "(concurrency 16, batch 100, prefetch 25) on an 8-connection pool, the heartbeat (if on) "
             "writing on the same pool; fresh database per variant and round, variants interleaved; "
             "medians (min-max). Method: `bench/workers.py`.", "",
             "| variant | drain (jobs/s) | ÷ off | WAL per drained job (bytes) | ÷ off "
             "| beats during the drain |",
             "|---|---:|---:|---:|---:|---:|"]
    for v in results:
        lines.append(f"| {v} | {med(v, 'drain'):,.0f} ({spread(v, 'drain')}) | "
                     f"{med(v, 'drain') / med(off, 'drain'):.3f} | "
                     f"{med(v, 'wal'):,.0f} ({spread(v, 'wal')}) | "
                     f"{med(v, 'wal') / med(off, 'wal'):.3f} | {med(v, 'beats'):.0f} |")
    per_hour = 3600 / 5 * beat["wal"]
    lines += ["", "Drain differences inside the spread of the `off` rows are the noise of a machine shared "
              "with other work (a heartbeat writes once every 1-5 s, against every claim and completion of "
              "the drain); WAL per job is the steady figure.",
              "", f"One heartbeat (the upsert of the worker's row, {BEATS} in a row on one connection): "
              f"{beat['ms']:.2f} ms median round trip, {beat['wal']:,.0f} bytes of WAL; at the default 5 s "
              f"that is {per_hour / 1024:,.0f} kB of WAL per worker per hour.", "",
              f"The page queries at {page_jobs:,} jobs (bench.dashboard's build, 0.1% running, held by "
              "worker-0..7), 8 workers alive and 200 gone, run as the dashboard runs them (no prepared "
              "statements, JIT off), median of 7 runs:", "",
              "| page | query | case | median ms | indexes (EXPLAIN) | seq scans |",
              "|---|---|---|---:|---|---|"]
    for case, m in pages:
        lines.append(f"| {case.page} | `{case.query}` | {case.label} | {m['ms']:.2f} | "
                     f"{', '.join(m['indexes']) or '-'} | {', '.join(m['seq']) or '-'} |")
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.workers", description=__doc__)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--page-jobs", type=int, default=1_000_000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    with BenchCluster() as cluster:
        meta = f"PostgreSQL {cluster.server_version()}, fsync on, {machine()['cpu']}"
        results = run_rounds(cluster, args.jobs, args.rounds)
        with cluster.database("jobkit") as url:
            beat = one_beat(url)
        with cluster.database("jobkit") as url:
            pages = page_queries(url, args.page_jobs)
    text = report(results, beat, pages, meta, args.jobs, args.rounds, args.page_jobs)
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "BENCHMARKS.md", START, END, text)
    scanned = any("jobs" in m["seq"] for _c, m in pages)
    return 1 if scanned else 0


if __name__ == "__main__":
    sys.exit(main())
