"""`python -m bench.index_cost [--jobs 20000] [--rounds 4] [--no-write]`: what the dashboard's two
full-table indexes cost the hot path.

Four databases on one cluster differ only in jobs_created_idx (the jobs page's keyset index, part
of migration 0003) and jobs_payload_idx (the optional GIN index of `[dashboard] payload_index`).
Each round bulk-enqueues ``--jobs`` jobs into each, then drains them with one Drainer at
concurrency 16, visiting the variants in turn (reversed every other round) so that a noisy machine
hits all four alike. Reports medians of enqueue and drain throughput and the WAL written per
drained job (the write amplification, which machine noise does not move). Writes the table between
the index-cost markers of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import psycopg
from jobkit.queries import queries

from . import jk, verify
from .cluster import BenchCluster
from .common import DrainConfig
from .report import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- index-cost:start -->", "<!-- index-cost:end -->"
VARIANTS = {  # name -> (created_at index, payload GIN index)
    "neither": (False, False), "jobs_created_idx (0003)": (True, False),
    "jobs_payload_idx": (False, True), "both": (True, True),
}


def prepare(url: str, created: bool, payload: bool) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        if not created:
            conn.execute("drop index jobkit.jobs_created_idx")
        if payload:
            conn.execute(queries("jobkit")["payload_index_create"])  # type: ignore[arg-type]


def one_round(url: str, n: int) -> tuple[float, float, float]:
    """(enqueue jobs/s, drain jobs/s, WAL bytes per drained job)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("truncate jobkit.jobs, jobkit.job_attempts")
    t = time.perf_counter()
    jk.fill(url, n)
    enqueue = n / (time.perf_counter() - t)
    with psycopg.connect(url, autocommit=True) as conn:
        start = conn.execute("select pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    tally = verify.Tally()
    drain = n / asyncio.run(jk.drain_async(url, DrainConfig(16), tally))
    check = verify.jobkit(url, n, tally)
    if not check.ok:
        raise SystemExit(f"exactly-once check failed: {check.detail}")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)).fetchone()
    wal = row[0] if row else 0
    return enqueue, drain, float(wal) / n


def run(cluster: BenchCluster, n: int, rounds: int) -> dict[str, list[tuple[float, float, float]]]:
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in VARIANTS}
    with cluster.database("jobkit") as a, cluster.database("jobkit") as b, \
            cluster.database("jobkit") as c, cluster.database("jobkit") as d:
        urls = dict(zip(VARIANTS, (a, b, c, d), strict=True))
        for name, (created, payload) in VARIANTS.items():
            prepare(urls[name], created, payload)
        for r in range(rounds):
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                results[name].append(one_round(urls[name], n))
    return results


def table(results: dict[str, list[tuple[float, float, float]]], n: int, rounds: int, meta: str) -> str:
    lines = [START, "### What the dashboard's indexes cost the hot path", "",
             f"`python -m bench.index_cost --jobs {n} --rounds {rounds}` ({meta}): medians over the rounds, "
             "variants interleaved on one cluster.", "",
             "| indexes on jobs besides the engine's | bulk enqueue (jobs/s) "
             "| drain, concurrency 16 (jobs/s) | WAL per drained job (bytes) |", "|---|---:|---:|---:|"]
    for name, rows in results.items():
        enq, drain, wal = (statistics.median(col) for col in zip(*rows, strict=True))
        lines.append(f"| {name} | {enq:,.0f} | {drain:,.0f} | {wal:,.0f} |")
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import os

    ap = argparse.ArgumentParser(prog="python -m bench.index_cost", description=__doc__)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    with BenchCluster() as cluster:
        results = run(cluster, args.jobs, args.rounds)
        text = table(results, args.jobs, args.rounds,
                     f"PostgreSQL {cluster.server_version()}, fsync on, {os.cpu_count()} cores")
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "BENCHMARKS.md", START, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
