"""`python -m bench.steps [--jobs N] [--steps S] [--concurrency C]`: what durable steps cost.

Issue 25's target: a job of S (10) durable steps at no more than 3x the database time of one plain
job. In a cluster of its own with pg_stat_statements preloaded, this enqueues N plain jobs and
drains them with the real Drainer on the PostgreSQL backend, then the same with N jobs whose
handler runs S ``ctx.step`` calls, and compares the server's own time per job (pg_stat_statements'
total_exec_time of every top-level statement: enqueue, claim, complete, and for the durable job
its load_steps and save_step calls), with the wall time of each drain beside it. Each durable step
stores one job_steps row (its size is printed too)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from .cluster import BenchCluster
from .common import execute


def _registry(steps: int) -> Any:
    import jobkit

    jobs = jobkit.Registry()

    @jobs.handler("bench.plain")
    async def plain(payload: Any, ctx: Any) -> Any:
        return {"ok": True}

    @jobs.handler("bench.durable")
    async def durable(payload: Any, ctx: Any) -> Any:
        for i in range(steps):
            await ctx.step(f"step{i}", _work, i)
        return {"ok": True}

    return jobs


async def _work(i: int) -> dict[str, int]:
    return {"i": i}


async def _drain(url: str, job_type: str, n: int, steps: int, concurrency: int) -> float:
    from jobkit.connector import Database
    from jobkit.jobs import NewJob
    from jobkit.lifecycle import Lifecycle
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer

    with Database(url).session() as s:
        life = Lifecycle(s)
        for start in range(0, n, 1000):
            life.enqueue_many([NewJob(job_type, {}) for _ in range(min(1000, n - start))])
    backend = PostgresBackend(url, max_size=concurrency + 2)
    await backend.open()
    try:
        drainer = Drainer(_registry(steps), backend, concurrency=concurrency)
        began = time.perf_counter()
        summary = await drainer.drain(job_type)
        took = time.perf_counter() - began
        await drainer.shutdown()
    finally:
        await backend.close()
    assert summary.completed == n, summary
    return took


def _server(url: str) -> tuple[float, list[tuple[int, float, str]]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("""select calls, total_exec_time,
                                      regexp_replace(left(query, 60), '\\s+', ' ', 'g')
                               from pg_stat_statements where dbid = (select oid from pg_database
                               where datname = current_database()) and query not like '%%pg_stat_statements%%'
                               order by total_exec_time desc""").fetchall()
        conn.execute("select pg_stat_statements_reset()")
    return sum(r[1] for r in rows), [(int(r[0]), float(r[1]), str(r[2])) for r in rows]


def measure(url: str, n: int, steps: int, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("plain", "durable"):
        execute(url, "select pg_stat_statements_reset()")
        wall = asyncio.run(_drain(url, f"bench.{kind}", n, steps, concurrency))
        total_ms, rows = _server(url)
        out[kind] = {"wall": wall, "db_ms_per_job": total_ms / n, "statements": rows}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.steps")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
    with BenchCluster(extra=extra) as cluster, cluster.database("jobkit") as url:
        execute(url, "create extension pg_stat_statements")
        result = measure(url, args.jobs, args.steps, args.concurrency)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            size = conn.execute("select pg_total_relation_size('jobkit.job_steps'), count(*) "
                                "from jobkit.job_steps").fetchone()
    assert size is not None
    plain, durable = result["plain"], result["durable"]
    ratio = durable["db_ms_per_job"] / plain["db_ms_per_job"]
    print(f"{args.jobs:,} jobs each, concurrency {args.concurrency}, PostgreSQL backend, one Drainer:")
    for kind in ("plain", "durable"):
        r = result[kind]
        label = "plain job" if kind == "plain" else f"{args.steps}-step durable job"
        print(f"  {label:<22} database {r['db_ms_per_job'] * 1000:8.1f} us/job   "
              f"drain {r['wall']:6.2f}s = {args.jobs / r['wall']:7,.0f} jobs/s")
        for calls, total, query in r["statements"][:6]:
            print(f"      {calls:>7} calls {total:9.1f} ms  {query}")
    print(f"  database time ratio durable/plain: {ratio:.2f}x (target <= 3x); "
          f"job_steps: {size[1]:,} rows, {size[0] / max(size[1], 1):.0f} bytes/row with its index")


if __name__ == "__main__":
    main()
