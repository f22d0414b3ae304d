"""procrastinate (pip `procrastinate`) with its psycopg (v3) connector: App.run_worker_async with
`concurrency` = c (its own knob: jobs run in parallel by one worker), wait=False to drain.
procrastinate fetches one job per round trip and finishes each with its own call."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import procrastinate

from . import latency, verify
from .common import BULK_BATCH, Sample, execute
from .procs import run as run_procs
from .systems import PROC_CONCURRENCY, PROCS, System
from .verify import Tally

QUEUE = "bench"
logging.getLogger("procrastinate").setLevel(logging.WARNING)


def make_app(url: str, on_job: Any = None, pool_size: int = 4) -> tuple[procrastinate.App, Any]:
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=pool_size)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue=QUEUE, pass_context=True)
    async def noop(context: Any, **kwargs: Any) -> None:
        if on_job is not None:
            on_job(context.job, kwargs)

    return app, noop


def install(url: str) -> None:
    async def main() -> None:
        app, _ = make_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(main())


def enqueue_single(url: str, n: int) -> Sample:
    async def main() -> float:
        app, noop = make_app(url)
        async with app.open_async():
            start = time.perf_counter()
            for i in range(n):
                await noop.defer_async(i=i)
            return time.perf_counter() - start

    return Sample(n / asyncio.run(main()), verify.procrastinate_enqueued(url, n))


async def _fill(noop: Any, n: int) -> None:
    for lo in range(0, n, BULK_BATCH):
        await noop.batch_defer_async(*({"i": k} for k in range(lo, min(n, lo + BULK_BATCH))))


def enqueue_bulk(url: str, n: int) -> Sample:
    async def main() -> float:
        app, noop = make_app(url)
        async with app.open_async():
            start = time.perf_counter()
            await _fill(noop, n)
            return time.perf_counter() - start

    return Sample(n / asyncio.run(main()), verify.procrastinate_enqueued(url, n))


def fill(url: str, n: int) -> None:
    async def main() -> None:
        app, noop = make_app(url)
        async with app.open_async():
            await _fill(noop, n)

    asyncio.run(main())
    execute(url, "analyze procrastinate_jobs")


async def _drain(url: str, concurrency: int, tally: Tally, ready: Any = None) -> float:
    """Drain with one worker; returns time.monotonic() at the end."""
    app, _ = make_app(url, lambda job, _kw: tally.hit(job.id), pool_size=concurrency + 2)
    async with app.open_async():
        if ready is not None:
            await ready()
        await app.run_worker_async(queues=[QUEUE], concurrency=concurrency, wait=False,
                                   install_signal_handlers=False)
        return time.monotonic()


def drain(url: str, n: int, concurrency: int) -> Sample:
    fill(url, n)
    tally = Tally()
    elapsed = tally.since_first(asyncio.run(_drain(url, concurrency, tally)))
    return Sample(n / elapsed, verify.procrastinate(url, n, tally))


def drain_procs(url: str, n: int) -> Sample:
    fill(url, n)
    elapsed, tally, per_proc = run_procs("bench.proc:proc_child", url, (PROC_CONCURRENCY,), PROCS)
    return Sample(n / elapsed, verify.procrastinate(url, n, tally), {"jobs per process": per_proc})


async def proc_child(url: str, concurrency: int, *, ready: Any) -> dict[str, Any]:
    tally = Tally()
    return tally.export(await _drain(url, concurrency, tally, ready))


def single_enqueuer(url: str) -> Any:
    """latency.Factory: Task.defer_async, one job per call."""
    loop = asyncio.new_event_loop()
    app, noop = make_app(url)
    loop.run_until_complete(app.open_async())

    def enqueue(payload: dict[str, Any]) -> None:
        loop.run_until_complete(noop.defer_async(**payload))

    def close() -> None:
        loop.run_until_complete(app.close_async())
        loop.close()

    return enqueue, close


def latency_run(url: str, rate: float, seconds: float) -> Sample:
    async def main() -> Sample:
        count = int(rate * seconds)
        recorder, tally = latency.Recorder(count), Tally()

        def on_job(job: Any, kwargs: dict[str, Any]) -> None:
            recorder.hit(kwargs)
            tally.hit(job.id)

        app, _ = make_app(url, on_job, pool_size=PROC_CONCURRENCY + 2)
        async with app.open_async():
            worker = asyncio.create_task(app.run_worker_async(
                queues=[QUEUE], concurrency=PROC_CONCURRENCY, wait=True, listen_notify=True,
                install_signal_handlers=False))
            await asyncio.sleep(0.5)  # LISTEN is in place
            proc = latency.start_paced("bench.proc:single_enqueuer", url, rate, count)
            await latency.wait_done(recorder, proc, timeout=15)
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        return latency.summarize(recorder, verify.procrastinate(url, count, tally), rate)

    return asyncio.run(main())


SYSTEM = System(
    key="procrastinate", name=f"procrastinate {procrastinate.__version__}",
    settings=("PsycopgConnector (pool max_size = concurrency + 2); App.run_worker_async(concurrency=c, "
              f"wait=False) to drain; {PROCS} processes x concurrency {PROC_CONCURRENCY}; async no-op task. "
              "Enqueue: Task.defer_async, then Task.batch_defer_async with 1,000 jobs. Latency: "
              "listen_notify=True, concurrency 16."),
    install=install, enqueue_single=enqueue_single, enqueue_bulk=enqueue_bulk, drain=drain,
    drain_procs=drain_procs, latency=latency_run,
)


