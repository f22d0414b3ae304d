"""PgQueuer (pip `pgqueuer`) on its asyncpg driver, with its documented fast settings: dequeue
batches of 100 and `pgq autovac`, in two durability levels: `balanced` (queue table logged, log
and statistics tables unlogged: its fastest crash-safe setting) and `durable` (everything logged,
like jobkit). Concurrency c = c QueueManagers in one process, each on its own asyncpg connection
(the `--dequeue` knob of PgQueuer's own tools/benchmark.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment
from pgqueuer.core.qm import QueueManager
from pgqueuer.domain.settings import DBSettings, Durability
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.queries import Queries

from . import latency, verify
from .common import BULK_BATCH, Sample
from .procs import run as run_procs
from .systems import PROC_CONCURRENCY, PROCS, System
from .verify import Tally

ENTRYPOINT = "noop"
BATCH = 100


def install(url: str, durability: Durability = Durability.balanced) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(url)
        try:
            qbe = QueryBuilderEnvironment(settings=DBSettings(durability=durability))
            queries = Queries(AsyncpgDriver(conn), qbe=qbe)
            await queries.install()
            await queries.optimize_autovacuum()
        finally:
            await conn.close()

    asyncio.run(main())


async def _queries(url: str) -> tuple[Queries, asyncpg.Connection]:
    conn = await asyncpg.connect(url)
    return Queries(AsyncpgDriver(conn)), conn


def enqueue_single(url: str, n: int) -> Sample:
    async def main() -> float:
        queries, conn = await _queries(url)
        start = time.perf_counter()
        for i in range(n):
            await queries.enqueue(ENTRYPOINT, json.dumps({"i": i}).encode(), 0)
        elapsed = time.perf_counter() - start
        await conn.close()
        return elapsed

    return Sample(n / asyncio.run(main()), verify.pgqueuer_enqueued(url, n))


def enqueue_bulk(url: str, n: int) -> Sample:
    async def main() -> float:
        queries, conn = await _queries(url)
        start = time.perf_counter()
        await _fill(queries, n)
        elapsed = time.perf_counter() - start
        await conn.close()
        return elapsed

    return Sample(n / asyncio.run(main()), verify.pgqueuer_enqueued(url, n))


async def _fill(queries: Queries, n: int) -> None:
    for lo in range(0, n, BULK_BATCH):
        size = min(BULK_BATCH, n - lo)
        await queries.enqueue([ENTRYPOINT] * size, [json.dumps({"i": lo + k}).encode() for k in range(size)],
                              [0] * size)


def fill(url: str, n: int) -> None:
    async def main() -> None:
        queries, conn = await _queries(url)
        await _fill(queries, n)
        await conn.execute("analyze pgqueuer")
        await conn.close()

    asyncio.run(main())


async def _managers(url: str, count: int, on_job: Any) -> tuple[list[QueueManager], list[Any]]:
    managers, conns = [], []
    for _ in range(count):
        conn = await asyncpg.connect(url)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(ENTRYPOINT)
        async def noop(job: Any) -> None:
            on_job(job)

        managers.append(qm)
        conns.append(conn)
    return managers, conns


async def _drain(url: str, count: int, tally: Tally, ready: Any = None, batch: int | None = BATCH) -> float:
    """Drain with `count` QueueManagers (``batch`` None: run()'s default); time.monotonic() at the end."""
    managers, conns = await _managers(url, count, lambda job: tally.hit(job.id))
    if ready is not None:
        await ready()
    sizes = {} if batch is None else {"batch_size": batch}
    await asyncio.gather(*(qm.run(mode=QueueExecutionMode.drain, **sizes) for qm in managers))
    end = time.monotonic()
    for conn in conns:
        await conn.close()
    return end


def drain(url: str, n: int, concurrency: int) -> Sample:
    fill(url, n)
    tally = Tally()
    elapsed = tally.since_first(asyncio.run(_drain(url, concurrency, tally)))
    return Sample(n / elapsed, verify.pgqueuer(url, n, tally))


def drain_defaults(url: str, n: int) -> Sample:
    """16 QueueManagers with QueueManager.run()'s default batch size (10)."""
    fill(url, n)
    tally = Tally()
    elapsed = tally.since_first(asyncio.run(_drain(url, PROC_CONCURRENCY, tally, batch=None)))
    return Sample(n / elapsed, verify.pgqueuer(url, n, tally), {"config": "16 QueueManagers, run() defaults"})


def drain_procs(url: str, n: int) -> Sample:
    fill(url, n)
    elapsed, tally, per_proc = run_procs("bench.pgq:proc_child", url, (PROC_CONCURRENCY,), PROCS)
    return Sample(n / elapsed, verify.pgqueuer(url, n, tally), {"jobs per process": per_proc})


async def proc_child(url: str, count: int, *, ready: Any) -> dict[str, Any]:
    tally = Tally()
    return tally.export(await _drain(url, count, tally, ready))


def single_enqueuer(url: str) -> Any:
    """latency.Factory: Queries.enqueue, one job per call, on one asyncpg connection."""
    loop = asyncio.new_event_loop()
    queries, conn = loop.run_until_complete(_queries(url))

    def enqueue(payload: dict[str, Any]) -> None:
        loop.run_until_complete(queries.enqueue(ENTRYPOINT, json.dumps(payload).encode(), 0))

    def close() -> None:
        loop.run_until_complete(conn.close())
        loop.close()

    return enqueue, close


def latency_run(url: str, rate: float, seconds: float) -> Sample:
    async def main() -> Sample:
        count = int(rate * seconds)
        recorder, tally = latency.Recorder(count), Tally()

        def on_job(job: Any) -> None:
            recorder.hit(json.loads(job.payload))
            tally.hit(job.id)

        managers, conns = await _managers(url, 1, on_job)
        task = asyncio.create_task(managers[0].run(batch_size=BATCH))
        await asyncio.sleep(0.5)  # LISTEN is in place
        proc = latency.start_paced("bench.pgq:single_enqueuer", url, rate, count)
        await latency.wait_done(recorder, proc, timeout=15)
        managers[0].shutdown.set()
        await asyncio.wait_for(task, 30)
        for conn in conns:
            await conn.close()
        return latency.summarize(recorder, verify.pgqueuer(url, count, tally), rate)

    return asyncio.run(main())


def _system(durability: Durability, key: str) -> System:
    return System(
        key=key, name=f"PgQueuer {__import__('pgqueuer').__version__} ({durability.value})",
        settings=(f"asyncpg driver; QueueManager.run(batch_size={BATCH}), durability `{durability.value}`, "
                  "`pgq autovac` applied; concurrency c = c QueueManagers (one asyncpg connection each) "
                  f"in one process; {PROCS} processes x {PROC_CONCURRENCY} QueueManagers; async no-op "
                  "entrypoint. Enqueue: Queries.enqueue (single, then lists of 1,000). Latency: its insert "
                  "trigger's NOTIFY, one QueueManager."),
        install=lambda url: install(url, durability), enqueue_single=enqueue_single,
        enqueue_bulk=enqueue_bulk, drain=drain, drain_procs=drain_procs, drain_defaults=drain_defaults,
        latency=latency_run,
    )


SYSTEM = _system(Durability.balanced, "pgqueuer")
SYSTEM_DURABLE = _system(Durability.durable, "pgqueuer-durable")
