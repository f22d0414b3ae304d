"""A good neighbour on pg_net (issue 21, Found 13): a burst of single-row enqueue transactions,
then another type's job and an application's own net.http_get, through the pg_net stand-in with
pg_net's real timing (batches of 200, a 1 s pause after each) and a worker with `jobkit worker
serve`'s defaults.

    python -m bench.neighbour [--jobs 3000] [--repeats 3] [--uncoalesced] [--async-commit]

Per run: pg_net requests jobkit sent for the burst; the enqueue rate of the one connection;
enqueue -> handler start p50/p99 of the burst; and, sent right after the burst, how long another
type's job waited to start and the net.http_get to reach its server. ``--uncoalesced`` replaces
the insert trigger's function with one that sends a wake-up per type and statement (every
transaction wakes, as before 0010), for comparison.
Starts its own PostgreSQL (fsync on); prints one line per run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from jobkit.handlers import Registry
from psycopg.types.json import Jsonb

from .cluster import BenchCluster
from .common import JOB_TYPE, percentile
from .wake import install_pg_net, worker

OTHER = "bench.other"
# every statement that inserts due jobs wakes each of their types (the cross-transaction coalescing
# of 0010, sql/shared/wake.sql's wake_needed, left out; no pause or wake_on_insert check: none is set)
UNCOALESCED = ("create or replace function jobkit.jobs_wake_on_insert() returns trigger "
               "language plpgsql security definer set search_path = '' as $$ begin "
               "perform jobkit._send_wake(n.type, 1) from (select distinct n.type from new_jobs n "
               "where n.status = 'pending' and n.scheduled_for <= pg_catalog.now()) n; "
               "return null; end $$")


@contextmanager
def http_target() -> Iterator[tuple[str, list[float]]]:
    """An application's endpoint: records when each GET arrives."""
    arrivals: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            arrivals.append(time.time())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/app", arrivals
    finally:
        server.shutdown()


def _burst(url: str, n: int, async_commit: bool) -> float:
    """``n`` single-row transactions on one connection, as fast as it goes; seconds taken."""
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        if async_commit:
            conn.execute("set synchronous_commit = off")
        for i in range(n):
            conn.execute("select jobkit.enqueue(%s, %s)", (JOB_TYPE, Jsonb({"i": i, "t": time.time()})))
    return time.monotonic() - started


def _after(url: str, target: str) -> float:
    """Another type's job and an unrelated net.http_get, right after the burst; when sent."""
    with psycopg.connect(url, autocommit=True) as conn:
        sent = time.time()
        conn.execute("select jobkit.enqueue(%s, '{}')", (OTHER,))
        conn.execute("select net.http_get(%s, timeout_milliseconds := 5000)", (target,))
    return sent


def run_once(url: str, n: int, uncoalesced: bool, async_commit: bool) -> dict[str, float]:
    install_pg_net(url)
    if uncoalesced:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(UNCOALESCED)
    latencies: dict[int, float] = {}
    other: list[float] = []
    jobs = Registry()

    @jobs.handler(JOB_TYPE, timeout=60)
    async def record(payload: Any, _ctx: Any) -> None:
        latencies.setdefault(int(payload["i"]), time.time() - float(payload["t"]))

    @jobs.handler(OTHER, timeout=60)
    async def other_started(_payload: Any, _ctx: Any) -> None:
        other.append(time.time())

    async def main() -> dict[str, float]:
        with http_target() as (target, arrivals):
            async with worker(url, jobs, "pg_net"):
                took = await asyncio.to_thread(_burst, url, n, async_commit)
                sent = await asyncio.to_thread(_after, url, target)
                deadline = time.monotonic() + 120
                while (len(latencies) < n or not other or not arrivals) and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("select count(*) from jobkit.wakeups where type = %s", (JOB_TYPE,)).fetchone()
        ms = [v * 1000 for v in latencies.values()]
        return {"requests": float(row[0]) if row else -1.0, "enqueue_per_s": n / took,
                "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "ran": float(len(ms)),
                "other_type_s": (other[0] - sent) if other else float("nan"),
                "http_get_s": (arrivals[0] - sent) if arrivals else float("nan")}

    return asyncio.run(main())


def enqueue_cost(url: str, n: int, rounds: int) -> dict[str, list[float]]:
    """Single-row enqueue transactions per second on one connection (synchronous_commit off, so
    the figure is the statement's cost, not the disk's), the variants interleaved in one database:
    sent (every transaction wakes: the insert trigger replaced by UNCOALESCED, as before 0010),
    fresh (0010's check, and every transaction still wakes: each enqueues a type of its own),
    coalesced (no worker: one wake-up a second), draining (a worker drains: no wake-up at all).
    Over pg_net (the stand-in's queue, not sent) and over NOTIFY."""
    from jobkit.config import Settings
    from jobkit.connector import Database
    from jobkit.schema.deploy import DeployOptions, deploy
    from jobkit.worker.secrets import set_secrets

    install_pg_net(url)
    set_secrets(Database(url), Settings(db_url=url), url="http://127.0.0.1:9/run", secret="x" * 40)
    with psycopg.connect(url, autocommit=True) as conn:
        original = conn.execute("select pg_get_functiondef('jobkit.jobs_wake_on_insert()'::regprocedure)"
                                ).fetchone()
    assert original is not None
    rates: dict[str, list[float]] = {}
    for transport in ("pg_net", "notify"):
        from jobkit.config import WakeConfig

        deploy(Database(url), Settings(db_url=url, wake=WakeConfig(transport=transport)),
               DeployOptions(schedules=False), echo=lambda _m: None)
        for _ in range(rounds):
            for variant in ("sent", "fresh", "coalesced", "draining"):
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("truncate jobkit.jobs, jobkit.wakeups, jobkit.wake_drains, jobkit.wake_sent")
                    conn.execute("truncate net.http_request_queue")
                    conn.execute(UNCOALESCED if variant == "sent" else original[0])
                    if variant == "draining":
                        conn.execute("select jobkit.wake_draining(%s, interval '1 hour')", (JOB_TYPE,))
                    conn.execute("set synchronous_commit = off")
                    started = time.monotonic()
                    for i in range(n):
                        job_type = f"{JOB_TYPE}.{i}" if variant == "fresh" else JOB_TYPE
                        conn.execute("select jobkit.enqueue(%s, %s)", (job_type, Jsonb({"i": i})))
                    rates.setdefault(f"{transport} {variant}", []).append(n / (time.monotonic() - started))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.neighbour", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uncoalesced", action="store_true", help="every transaction wakes (before 0010)")
    parser.add_argument("--async-commit", action="store_true",
                        help="the enqueuer's commits do not wait for the disk (a faster burst)")
    parser.add_argument("--enqueue-cost", action="store_true",
                        help="only the single-enqueue cost of each wake-up variant (jobs/s)")
    args = parser.parse_args()
    if args.enqueue_cost:
        with BenchCluster(echo=lambda _m: None) as cluster, cluster.database("jobkit") as url:
            for name, values in enqueue_cost(url, args.jobs, args.repeats).items():
                print(f"{name}: median {statistics.median(values):.0f} jobs/s "
                      f"({', '.join(f'{v:.0f}' for v in values)})")
        return
    runs = []
    with BenchCluster(echo=lambda _m: None) as cluster:
        for k in range(args.repeats):
            with cluster.database("jobkit") as url:
                result = run_once(url, args.jobs, args.uncoalesced, args.async_commit)
            runs.append(result)
            print(f"run {k + 1}: " + ", ".join(f"{key} {value:.3g}" for key, value in result.items()),
                  flush=True)
    print("median: " + ", ".join(f"{key} {statistics.median(r[key] for r in runs):.3g}" for key in runs[0]))


if __name__ == "__main__":
    main()
