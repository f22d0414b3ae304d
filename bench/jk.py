"""jobkit's own figures through its real code paths: Lifecycle.enqueue / enqueue_many, and the
Drainer over PostgresBackend (one process, or several OS processes each running a Drainer)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import jobkit
import psycopg
from jobkit.connector import Database
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

from . import verify
from .common import BULK_BATCH, JOB_TYPE, DrainConfig, Sample, execute
from .procs import run as run_procs
from .verify import Tally

SYSTEM = "jobkit"


def enqueue_single(url: str, n: int) -> Sample:
    """``n`` single-row jobkit.enqueue calls in a loop on one connection (each its own commit)."""
    with Database(url).session() as session:
        manager = Lifecycle(session, "jobkit")
        start = time.perf_counter()
        for i in range(n):
            manager.enqueue(NewJob(JOB_TYPE, {"i": i}))
        elapsed = time.perf_counter() - start
    return Sample(n / elapsed, verify.jobkit_enqueued(url, n))


def enqueue_bulk(url: str, n: int, batch: int = BULK_BATCH) -> Sample:
    """``n`` jobs through jobkit.enqueue_many, ``batch`` per statement."""
    with Database(url).session() as session:
        manager = Lifecycle(session, "jobkit")
        start = time.perf_counter()
        _fill(manager, n, batch)
        elapsed = time.perf_counter() - start
    return Sample(n / elapsed, verify.jobkit_enqueued(url, n))


def enqueue_single_async(url: str, n: int) -> Sample:
    """``n`` ``await jobkit.enqueue_async`` calls in a loop on one AsyncConnection (autocommit)."""
    async def main() -> float:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            for i in range(n):
                await jobkit.enqueue_async(conn, JOB_TYPE, {"i": i})
            return time.perf_counter() - start

    elapsed = asyncio.run(main())
    return Sample(n / elapsed, verify.jobkit_enqueued(url, n))


def enqueue_bulk_async(url: str, n: int, batch: int = BULK_BATCH) -> Sample:
    """``n`` jobs through ``await jobkit.enqueue_many_async``, ``batch`` per statement."""
    async def main() -> float:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            for lo in range(0, n, batch):
                await jobkit.enqueue_many_async(
                    conn, [NewJob(JOB_TYPE, {"i": i}) for i in range(lo, min(n, lo + batch))])
            return time.perf_counter() - start

    elapsed = asyncio.run(main())
    return Sample(n / elapsed, verify.jobkit_enqueued(url, n))


def fill(url: str, n: int, batch: int = BULK_BATCH) -> None:
    """``n`` pending no-op jobs via enqueue_many, then ANALYZE."""
    with Database(url).session() as session:
        _fill(Lifecycle(session, "jobkit"), n, batch)
    execute(url, "analyze jobkit.jobs", "analyze jobkit.job_attempts")


def _fill(manager: Lifecycle, n: int, batch: int) -> None:
    for lo in range(0, n, batch):
        manager.enqueue_many([NewJob(JOB_TYPE, {"i": i}) for i in range(lo, min(n, lo + batch))])


def registry(tally: Tally) -> Registry:
    jobs = Registry()

    @jobs.handler(JOB_TYPE, timeout=60)
    async def noop(payload: Any, ctx: Any) -> None:
        tally.hit(ctx.id)

    return jobs


async def drain_async(url: str, config: DrainConfig, tally: Tally, pool_size: int = 4) -> float:
    """Drain every due job once with one Drainer; seconds from its first handler call to its end."""
    backend = PostgresBackend(url, max_size=pool_size)
    await backend.open()
    try:
        drainer = Drainer(registry(tally), backend, concurrency=config.concurrency,
                          batch_size=config.batch_size, prefetch=config.effective_prefetch)
        await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
        end = time.monotonic()
        await drainer.shutdown(grace=timedelta(0))
        return tally.since_first(end)
    finally:
        await backend.close()


def drain(url: str, n: int, config: DrainConfig) -> Sample:
    """Fill ``n`` jobs, drain them with one Drainer; jobs/s."""
    fill(url, n)
    tally = Tally()
    elapsed = asyncio.run(drain_async(url, config, tally))
    return Sample(n / elapsed, verify.jobkit(url, n, tally), {"config": config.describe()})


def drain_defaults(url: str, n: int) -> Sample:
    """`jobkit worker serve`'s defaults: concurrency 16, the adaptive claim window, the CLI's pool."""
    fill(url, n)
    tally = Tally()

    async def main() -> float:
        backend = PostgresBackend(url, max_size=8)  # workerapp.postgres_backend at concurrency 16
        await backend.open()
        try:
            drainer = Drainer(registry(tally), backend, concurrency=16)
            await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
            end = time.monotonic()
            await drainer.shutdown(grace=timedelta(0))
            return tally.since_first(end)
        finally:
            await backend.close()

    elapsed = asyncio.run(main())
    return Sample(n / elapsed, verify.jobkit(url, n, tally), {"config": "concurrency=16, adaptive window"})


def drain_procs(url: str, n: int, config: DrainConfig, procs: int = 2) -> Sample:
    """Fill ``n`` jobs, drain them with ``procs`` OS processes, each running a Drainer."""
    fill(url, n)
    elapsed, tally, per_proc = run_procs("bench.jk:proc_child", url, (config,), procs)
    return Sample(n / elapsed, verify.jobkit(url, n, tally),
                  {"config": f"{procs} processes x ({config.describe()})", "jobs per process": per_proc})


async def proc_child(url: str, config: DrainConfig, *, ready: Any) -> dict[str, Any]:
    tally = Tally()
    backend = PostgresBackend(url, max_size=4)
    await backend.open()
    try:
        drainer = Drainer(registry(tally), backend, concurrency=config.concurrency,
                          batch_size=config.batch_size, prefetch=config.effective_prefetch)
        await ready()
        await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
        end = time.monotonic()
        await drainer.shutdown(grace=timedelta(0))
    finally:
        await backend.close()
    return tally.export(end)
