"""`python -m bench.waits [--pairs N] [--sleepers M]`: what waits cost (issue 25).

In a cluster of its own: (1) the wait/emit round trip: one job at a time waits for its event (the
real Drainer on the PostgreSQL backend), then the clock starts, ``jobkit.emit`` stores the event
and resumes the wait in its transaction, and a drain claims the job, replays its handler and
completes it; p50/p99 over N jobs (no wake-up latency: the drain is called directly). (2) M jobs
that sleep a day: after they are all suspended, the worker process holds none of them (its
Drainer's running set), and its resident memory and CPU time are read before and after a 10 s
idle period; the database's job_waits size per sleeping job is printed."""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from typing import Any

from .cluster import BenchCluster


def _registry() -> Any:
    import jobkit

    jobs = jobkit.Registry()

    @jobs.handler("bench.wait")
    async def wait(payload: Any, ctx: Any) -> Any:
        got = await ctx.wait_for_event("bench.go", key=payload["i"])
        return got.data

    @jobs.handler("bench.sleep")
    async def sleep(payload: Any, ctx: Any) -> Any:
        await ctx.sleep("1d")

    return jobs


async def _round_trips(url: str, n: int) -> list[float]:
    import jobkit
    from jobkit.jobs import NewJob
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer

    backend = PostgresBackend(url)
    await backend.open()
    took = []
    try:
        drainer = Drainer(_registry(), backend, concurrency=4)
        for i in range(n):
            await backend.enqueue(NewJob("bench.wait", {"i": i}))
            assert (await drainer.drain("bench.wait")).waited == 1
            began = time.perf_counter()
            await jobkit.emit_async(url, "bench.go", key=i, data=i)
            assert (await drainer.drain("bench.wait")).completed == 1
            took.append(time.perf_counter() - began)
        await drainer.shutdown()
    finally:
        await backend.close()
    return took


async def _sleepers(url: str, m: int) -> dict[str, float]:
    from jobkit.jobs import NewJob
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer

    backend = PostgresBackend(url, max_size=18)
    await backend.open()
    try:
        for start in range(0, m, 1000):
            await backend.enqueue_many([NewJob("bench.sleep", {}) for _ in range(min(1000, m - start))])
        drainer = Drainer(_registry(), backend, concurrency=16)
        began = time.perf_counter()
        waited = 0
        while waited < m:  # a drain ends at its budget (25 s): go on until every job sleeps
            summary = await drainer.drain("bench.sleep")
            assert summary.waited, summary
            waited += summary.waited
        suspend_s = time.perf_counter() - began
        rss0, cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
        await asyncio.sleep(10)
        rss1, cpu1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
        await drainer.shutdown()
        return {"suspend_s": suspend_s, "held": float(drainer.unfinished), "rss0_mb": rss0 / 1024,
                "rss1_mb": rss1 / 1024, "idle_cpu_s": cpu1 - cpu0}
    finally:
        await backend.close()


def main() -> None:
    import psycopg

    ap = argparse.ArgumentParser(prog="python -m bench.waits")
    ap.add_argument("--pairs", type=int, default=500)
    ap.add_argument("--sleepers", type=int, default=10_000)
    args = ap.parse_args()
    with BenchCluster() as cluster, cluster.database("jobkit") as url:
        took = sorted(asyncio.run(_round_trips(url, args.pairs)))
        p50 = statistics.median(took) * 1000
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))] * 1000
        print(f"wait/emit round trip over {args.pairs} jobs: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
              "(emit -> claim -> replay -> complete, one Drainer, PostgreSQL backend)")
        s = asyncio.run(_sleepers(url, args.sleepers))
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("select count(*), pg_total_relation_size('jobkit.job_waits') "
                               "from jobkit.job_waits").fetchone()
        assert row is not None
        print(f"{args.sleepers:,} sleeping jobs: suspended in {s['suspend_s']:.2f}s "
              f"({args.sleepers / s['suspend_s']:,.0f}/s); the worker holds {s['held']:.0f} of them; "
              "over 10 s "
              f"idle its CPU time was {s['idle_cpu_s'] * 1000:.0f} ms and its max RSS {s['rss0_mb']:.0f} -> "
              f"{s['rss1_mb']:.0f} MB; job_waits {row[0]:,} rows, {row[1] / max(row[0], 1):.0f} bytes/row "
              "with its indexes")


if __name__ == "__main__":
    main()
