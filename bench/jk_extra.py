"""jobkit's wake-path latency (insert trigger -> NOTIFY -> Listener -> Drainer), claim cost against
the backlog's size and shape, and table size / dead tuples after many jobs with prune on or off."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg
from jobkit.connector import Database
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle, complete_params
from jobkit.queries import queries
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from psycopg.rows import dict_row

from . import jk, latency, verify
from .common import JOB_TYPE, DrainConfig, Sample, execute, median, percentile, scalar
from .verify import Tally

WORKER = DrainConfig(16)
# The prune schedule's own command (sql/cron_commands.sql), with every finished job past retention.
PRUNE_SQL = "select jobkit.prune('0'::interval) as jobs, jobkit.prune_wakeups('0'::interval) as wakeups"


def single_enqueuer(url: str) -> Any:
    """latency.Factory: jobkit.enqueue, one job per call, on one connection."""
    cm = Database(url).session()
    manager = Lifecycle(cm.__enter__(), "jobkit")

    def enqueue(payload: dict[str, Any]) -> None:
        manager.enqueue(NewJob(JOB_TYPE, payload))

    return enqueue, lambda: cm.__exit__(None, None, None)


def latency_run(url: str, rate: float, seconds: float) -> Sample:
    return asyncio.run(_latency(url, rate, int(rate * seconds)))


async def _latency(url: str, rate: float, count: int) -> Sample:
    recorder, tally = latency.Recorder(count), Tally()
    jobs = Registry()

    @jobs.handler(JOB_TYPE, timeout=60)
    async def record(payload: Any, ctx: Any) -> None:
        recorder.hit(payload)
        tally.hit(ctx.id)

    channel = str(scalar(url, "select jobkit.setting('channel') #>> '{}'"))
    options = EndpointOptions(concurrency=WORKER.concurrency, batch_size=WORKER.batch_size,
                              prefetch=WORKER.effective_prefetch, listen=channel, linger=0.0,
                              grace=timedelta(seconds=5))
    endpoint = WorkerEndpoint(jobs, PostgresBackend(url, max_size=4), options)
    await endpoint.start()
    try:
        assert endpoint.listener is not None
        await endpoint.listener.listening.wait()  # LISTEN is in place
        proc = latency.start_paced("bench.jk_extra:single_enqueuer", url, rate, count)
        await latency.wait_done(recorder, proc, timeout=15)
    finally:
        await endpoint.stop()
    return latency.summarize(recorder, verify.jobkit(url, count, tally), rate)


def _insert(url: str, n: int, *, future: bool = False) -> None:
    """``n`` jobs as enqueue_many stores them, in one INSERT ... SELECT (fast bulk fill)."""
    when = "now() + interval '1 day'" if future else "now()"
    for lo in range(0, n, 200_000):
        execute(url, f"insert into jobkit.jobs (type, payload, max_attempts, scheduled_for) "
                     f"select '{JOB_TYPE}', jsonb_build_object('i', g), 3, {when} "
                     f"from generate_series({lo}, {min(n, lo + 200_000) - 1}) g")
    execute(url, "vacuum (analyze) jobkit.jobs")


def claim_cost(url: str, due: int, future: int = 0, claims: int = 100, limit: int = 50) -> Sample:
    """Median ms of one jobkit.claim_jobs(limit) round trip (the worker's named query, prepared)
    with ``due`` runnable jobs and ``future`` jobs scheduled a day ahead; each batch is then
    completed (untimed), as a worker would."""
    if future:
        _insert(url, future, future=True)
    _insert(url, due)
    q = queries("jobkit")
    params = {"type": JOB_TYPE, "limit": limit, "worker": "bench", "lease": timedelta(minutes=5),
              "rate_key": None, "max_attempts": None}
    times: list[float] = []
    claimed = 0
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=0) as conn:
        for k in range(claims + 5):
            start = time.perf_counter()
            rows = conn.execute(q["claim"], params).fetchall()  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            if k >= 5:  # the first claims warm the plan cache
                times.append(elapsed * 1000)
            conn.execute(q["complete"],  # type: ignore[arg-type]
                         complete_params([(r["id"], r["attempts"], None) for r in rows]))
            claimed += len(rows)
    check = verify.jobkit_claimed(url, claimed, expected=(claims + 5) * limit, pending=due + future - claimed)
    return Sample(median(times), check, {"p95_ms": percentile(times, 95), "claims": claims,
                                         "due": due, "future": future})


def bloat(url: str, total: int, wave: int, prune: bool) -> Sample:
    """Process ``total`` jobs in waves of ``wave`` (enqueue_many, then drain); with ``prune`` the
    prune schedule's command runs after every wave. Value: jobs + job_attempts + wakeups, MB."""
    tally, pruned = Tally(), 0
    growth: list[tuple[int, float]] = []  # (jobs processed, MB) after each wave

    async def run() -> None:
        nonlocal pruned
        backend = PostgresBackend(url, max_size=4)
        await backend.open()
        drainer = Drainer(jk.registry(tally), backend, concurrency=WORKER.concurrency,
                          batch_size=WORKER.batch_size, prefetch=WORKER.effective_prefetch)
        try:
            for lo in range(0, total, wave):
                await asyncio.to_thread(jk.fill, url, min(wave, total - lo))
                await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
                if prune:
                    pruned += int(scalar(url, PRUNE_SQL))
                growth.append((lo + wave, total_mb(url)))
            await drainer.shutdown(grace=timedelta(0))
        finally:
            await backend.close()

    asyncio.run(run())
    check = verify.jobkit(url, total, tally, pruned=pruned)
    time.sleep(1.0)  # let the backends' statistics reach pg_stat_user_tables
    sizes = table_sizes(url)
    value = sum(s["total_mb"] for s in sizes.values())
    return Sample(value, check, {"tables": sizes, "pruned": pruned, "growth": growth})


def total_mb(url: str) -> float:
    return float(scalar(url, "select sum(pg_total_relation_size(c.oid)) / 1048576.0 from pg_class c "
                             "where c.oid in ('jobkit.jobs'::regclass, 'jobkit.job_attempts'::regclass, "
                             "'jobkit.wakeups'::regclass)"))


def table_sizes(url: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute("""
            select c.relname as name, pg_table_size(c.oid) / 1048576.0 as table_mb,
                   pg_indexes_size(c.oid) / 1048576.0 as index_mb,
                   pg_total_relation_size(c.oid) / 1048576.0 as total_mb,
                   s.n_live_tup as live, s.n_dead_tup as dead,
                   s.autovacuum_count + s.vacuum_count as vacuums
            from pg_class c join pg_stat_user_tables s on s.relid = c.oid
            where c.relnamespace = 'jobkit'::regnamespace and c.relname in ('jobs', 'job_attempts', 'wakeups')
            order by c.relname""").fetchall()
    return {r.pop("name"): {k: float(v) if k.endswith("_mb") else int(v) for k, v in r.items()} for r in rows}
