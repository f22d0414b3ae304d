"""`python -m bench.features [--rounds 2] [--quick] [--no-write]`: what each opt-in feature costs.

Issue 23, item 3. One cluster (fsync on); each variant is a fresh database deployed with one
feature on (``none``: every feature off), measured in a child process of its own (an OpenTelemetry
provider cannot be unset in a process), variants interleaved and reversed every other round so a
noisy machine hits them alike. Every variant enqueues the same payload ``{"i": n, "tenant": n % 50}``
of one type and drains it with one Drainer at a fixed window (concurrency 16, batch 100,
prefetch 25). Per variant, medians over the rounds of:

- single enqueue: ``jobkit.enqueue(conn, ...)`` in a loop on one autocommit connection;
- bulk enqueue: ``jobkit.enqueue_many(conn, ...)``, 1,000 jobs a call;
- drain: jobs/s from the first handler call to the end, and the WAL bytes written per drained job.

The variants:

- ``concurrency keys``: the type is fair with the key template ``t{payload.tenant}`` (50 keys);
- ``[user_api]``: the per-user API deployed (its row triggers on jobs; these jobs have no owner);
- ``tracing``: an OpenTelemetry SDK TracerProvider with a batch processor and an exporter that
  drops the spans (enqueue, claim and handler spans are made, the trace context stored);
- ``payload index``: ``[dashboard] payload_index = true`` (the GIN index);
- ``created index``: ``[dashboard] created_index = true`` (the jobs page's keyset index, opt-in
  since issue 23);
- ``waiters``: every job registered with ``wait_on`` before the drain (each completion sends the
  NOTIFY, as when a producer waits on every job);
- ``progress``: the handler reports ``ctx.progress(0.5)`` once.

Writes the table between the feature-cost markers of docs/BENCHMARKS.md (not with --no-write).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- feature-cost:start -->", "<!-- feature-cost:end -->"
VARIANTS = ("none", "concurrency keys", "[user_api]", "tracing", "payload index", "created index", "waiters",
            "progress")
JOB = "bench.feature"


def settings_for(variant: str, url: str) -> Any:
    from jobkit.config import KeyTemplate, Settings, TypeConfig, UserApiConfig

    if variant == "concurrency keys":
        fair = TypeConfig(fair=True, concurrency_key=KeyTemplate.parse("t{payload.tenant}", "bench"))
        return Settings(db_url=url, types={JOB: fair})
    if variant == "[user_api]":
        return Settings(db_url=url, user_api=UserApiConfig(schema="jobkit_user", types=(JOB,)))
    if variant == "payload index":
        return Settings(db_url=url, payload_index=True)
    if variant == "created index":
        return Settings(db_url=url, created_index=True)
    return Settings(db_url=url)


def trace_everything() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


def child(variant: str, admin_url: str, sizes: dict[str, int]) -> dict[str, float]:
    import asyncio
    import time
    from datetime import timedelta

    import jobkit
    import psycopg
    from jobkit.connector import Database
    from jobkit.handlers import Registry
    from jobkit.jobs import NewJob
    from jobkit.schema.deploy import DeployOptions, deploy
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer
    from psycopg import sql

    from .common import scalar
    from .verify import Tally

    if variant == "tracing":
        trace_everything()
    name = f"f_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    out: dict[str, float] = {}

    def lsn() -> int:
        return int(scalar(url, "select pg_current_wal_lsn() - '0/0'::pg_lsn"))

    def payload(i: int) -> dict[str, int]:
        return {"i": i, "tenant": i % 50}

    try:
        deploy(Database(url), settings_for(variant, url), DeployOptions(schedules=False),
               echo=lambda _m: None)
        with psycopg.connect(url, autocommit=True) as conn:
            jobkit.enqueue(conn, JOB, payload(-1))
            start = time.perf_counter()
            for i in range(sizes["single"]):
                jobkit.enqueue(conn, JOB, payload(i))
            out["single"] = sizes["single"] / (time.perf_counter() - start)
            conn.execute("delete from jobkit.jobs")
            conn.execute("vacuum analyze jobkit.jobs")
            n = sizes["bulk"]
            before = lsn()
            start = time.perf_counter()
            for lo in range(0, n, 1000):
                jobkit.enqueue_many(conn, [NewJob(JOB, payload(i)) for i in range(lo, min(n, lo + 1000))])
            out["bulk"] = n / (time.perf_counter() - start)
            out["wal_enqueue"] = (lsn() - before) / n
            conn.execute("vacuum analyze jobkit.jobs")
            if variant == "waiters":
                conn.execute("select jobkit.wait_on(array(select id from jobkit.jobs), interval '1 hour')")
        tally = Tally()
        registry = Registry()

        @registry.handler(JOB, timeout=60)
        async def handle(_payload: Any, ctx: Any) -> None:
            if variant == "progress":
                ctx.progress(0.5)
            tally.hit(ctx.id)

        async def drain() -> float:
            backend = PostgresBackend(url, max_size=4)
            await backend.open()
            try:
                drainer = Drainer(registry, backend, concurrency=16, batch_size=100, prefetch=25)
                await drainer.drain(JOB, budget=timedelta(hours=1))
                end = time.monotonic()
                await drainer.shutdown(grace=timedelta(0))
                return tally.since_first(end)
            finally:
                await backend.close()

        before = lsn()
        elapsed = asyncio.run(drain())
        out["wal_drain"] = (lsn() - before) / n
        out["drain"] = n / elapsed
        done = scalar(url, "select count(*) from jobkit.jobs where status = 'completed'")
        if done != n or tally.calls != n:
            raise SystemExit(f"{variant}: {done} completed, {tally.calls} handler calls, expected {n}")
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))
    return out


def commit() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h"],
                          capture_output=True, text=True)
    return f"commit {head.stdout.strip() or 'unknown'}"


def run_variant(variant: str, admin_url: str, sizes: dict[str, int]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "bench.features", "--child", variant, admin_url,
                           json.dumps(sizes)], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def table(results: dict[str, list[dict[str, float]]]) -> str:
    def med(variant: str, key: str) -> float:
        return statistics.median(r[key] for r in results[variant])

    def spread(variant: str, key: str) -> str:
        values = [r[key] for r in results[variant]]
        return f"{min(values):,.0f}-{max(values):,.0f}"

    lines = ["| feature on | single enqueue (jobs/s) | ÷ none | bulk enqueue (jobs/s) | ÷ none | "
             "drain, fixed window (jobs/s) | ÷ none | WAL per job: enqueue + drain (bytes) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for v in results:
        cells = []
        for key in ("single", "bulk", "drain"):
            cells.append(f"{med(v, key):,.0f} ({spread(v, key)})")
            cells.append(f"{med(v, key) / med('none', key):.2f}")
        wal = f"{med(v, 'wal_enqueue'):,.0f} + {med(v, 'wal_drain'):,.0f}"
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {wal} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.features", description=__doc__)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="smaller N")
    ap.add_argument("--only", default=None, help="comma-separated variants (none is always run)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], json.loads(args.child[2]))))
        return 0
    from .cluster import BenchCluster, machine
    from .report import write_section

    sizes = {"single": 300, "bulk": 5_000} if args.quick else {"single": 1_000, "bulk": 20_000}
    chosen = [v for v in (args.only or "").split(",") if v and v != "none"]
    variants = ["none", *chosen] if chosen else list(VARIANTS)
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    with BenchCluster() as cluster:
        version = cluster.server_version()
        for r in range(args.rounds):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                got = run_variant(v, cluster.url(), sizes)
                results[v].append(got)
                print(f"round {r + 1} {v}: " + ", ".join(f"{k}={x:,.0f}" for k, x in got.items()), flush=True)
    text = table(results)
    print()
    print(text)
    if not args.no_write:
        cmd = "python -m bench.features " + " ".join(a for a in (argv or sys.argv[1:]))
        body = (f"{START}\n### Issue 23: what each feature costs\n\n"
                f"`{cmd.strip()}` (PostgreSQL {version}, fsync on, "
                f"{machine()['cpu']}; {commit()}): medians over {args.rounds} rounds "
                f"(min-max in brackets), variants interleaved on one cluster; {sizes['single']:,} single "
                f"enqueues, {sizes['bulk']:,} jobs bulk-enqueued and drained per variant and round. "
                f"What each variant does: `bench/features.py`.\n\n{text}\n{END}")
        write_section(ROOT / "docs" / "BENCHMARKS.md", START, END, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
