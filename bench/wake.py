"""The path users run: the database wakes the worker. jobkit only.

- **Backlog through the wake path**: N jobs enqueued in one statement; the insert trigger wakes a
  worker (over the pg_net stand-in, with pg_net's real timing, in its own process; or over NOTIFY)
  and it drains them all. Jobs/s from the enqueue's commit to the last completion, next to the
  direct Drainer on the same N with the same worker settings (its `drain()` call to its return).
- **Burst**: 1,000 single-row enqueues in one second through pg_net: enqueue -> handler start
  p50 / p99, with the worker's default lingering and without.
- **Punctuality**: delayed jobs (run_at 0.5-8 s ahead) and retries (Retry(after=1-5 s)): how late
  each starts after it became due, with no cron at all.

The worker is jobkit's WorkerEndpoint with `jobkit worker serve`'s defaults (concurrency 16, the
adaptive claim window), served by uvicorn in the benchmark process.
"""

from __future__ import annotations

import asyncio
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.handlers import Registry, Retry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.secrets import set_secrets

from . import latency, verify
from .common import JOB_TYPE, Sample, percentile
from .verify import Tally

ROOT = Path(__file__).resolve().parents[1]
SECRET = "bench-wake-secret-0123456789abcdef0123456789"
CONCURRENCY = 16  # `jobkit worker serve`'s default


# ---- the pg_net stand-in, in a process of its own (tests/standins) -----------------------------

_STANDIN = """
import signal, sys
sys.path.insert(0, sys.argv[2])
from standins import PgNetStandIn
worker = PgNetStandIn(sys.argv[1]).start()
print("ready", flush=True)
signal.sigwait([signal.SIGTERM])
worker.stop()
"""


def install_pg_net(url: str) -> None:
    """The stand-in's `net` schema, then jobkit redeployed so that its transport is pg_net."""
    sys.path.insert(0, str(ROOT / "tests"))
    from standins import PgNetStandIn

    PgNetStandIn(url).install()
    deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False), echo=lambda _m: None)


@asynccontextmanager
async def pg_net(url: str) -> AsyncIterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", _STANDIN, url, str(ROOT / "tests")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


@asynccontextmanager
async def worker(url: str, registry: Registry, transport: str,
                 **options: Any) -> AsyncIterator[WorkerEndpoint]:
    """An endpoint with the CLI's defaults, woken over ``transport`` ("pg_net" or "notify")."""
    import uvicorn

    listen = "jobkit_wake" if transport == "notify" else None
    defaults = {"concurrency": CONCURRENCY, "secret": SECRET, "listen": listen,
                "linger": 0.0 if listen else 2.0, **options}
    endpoint = WorkerEndpoint(registry, PostgresBackend(url, max_size=8), EndpointOptions(**defaults))
    await endpoint.start()
    server = None
    try:
        if listen:
            assert endpoint.listener is not None
            await endpoint.listener.listening.wait()
            yield endpoint
            return
        port = _free_port()
        await asyncio.to_thread(set_secrets, Database(url), Settings(db_url=url),
                                url=f"http://127.0.0.1:{port}/run", secret=SECRET)
        server = uvicorn.Server(uvicorn.Config(endpoint.app, host="127.0.0.1", port=port, lifespan="off",
                                               log_level="warning"))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.wait([serving], timeout=0.01)
        async with pg_net(url):
            yield endpoint
    finally:
        if server is not None:
            server.should_exit = True
        await endpoint.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until(check: Callable[[], bool], timeout: float) -> None:
    """Check every millisecond, in the worker's own event loop (no database round trip)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the jobs did not all run in time")
        await asyncio.sleep(0.001)


# ---- backlog --------------------------------------------------------------------------------------

def _enqueue_backlog(url: str, n: int) -> None:
    with Database(url).session() as session:
        Lifecycle(session, "jobkit").enqueue_many([NewJob(JOB_TYPE, {"i": i}) for i in range(n)])


def rounds(n: int) -> int:
    """Small backlogs drain in a fraction of a second: time several rounds and take the median."""
    return 3 if n <= 10_000 else 1


def backlog(url: str, n: int, transport: str) -> Sample:
    """N jobs in one statement, then the wake path drains them; jobs/s from the commit until every
    completion returned (the median of ``rounds(n)`` rounds in the same database)."""
    if transport == "pg_net":
        install_pg_net(url)

    async def main() -> tuple[list[float], Tally]:
        from . import jk

        tally, times = Tally(), []
        async with worker(url, jk.registry(tally), transport) as endpoint:
            drainer = endpoint.drainer
            assert drainer is not None
            for k in range(1, rounds(n) + 1):
                await asyncio.to_thread(_enqueue_backlog, url, n)
                committed = time.monotonic()
                await _until(lambda k=k: tally.calls >= k * n and drainer.held == 0, 600)
                times.append(time.monotonic() - committed)
        return times, tally

    times, tally = asyncio.run(main())
    return Sample(n / statistics.median(times), verify.jobkit(url, n * rounds(n), tally),
                  {"transport": transport, "jobs": n, "rounds": [round(n / t) for t in times]})


def direct(url: str, n: int) -> Sample:
    """The same N drained by a Drainer called directly, with the same worker defaults (the median of
    ``rounds(n)`` rounds, each from its `drain()` call to its return)."""
    async def main() -> tuple[list[float], Tally]:
        from . import jk

        tally, times = Tally(), []
        backend = PostgresBackend(url, max_size=8)
        await backend.open()
        try:
            drainer = Drainer(jk.registry(tally), backend, concurrency=CONCURRENCY)
            for _ in range(rounds(n)):
                await asyncio.to_thread(_enqueue_backlog, url, n)
                start = time.monotonic()
                await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
                times.append(time.monotonic() - start)
            await drainer.shutdown(grace=timedelta(0))
            return times, tally
        finally:
            await backend.close()

    times, tally = asyncio.run(main())
    return Sample(n / statistics.median(times), verify.jobkit(url, n * rounds(n), tally),
                  {"jobs": n, "rounds": [round(n / t) for t in times]})


# ---- burst ----------------------------------------------------------------------------------------

def burst(url: str, count: int, linger: float | None = None) -> Sample:
    """``count`` single-row enqueues in one second through pg_net; p50 (value) and p99 in ms."""
    install_pg_net(url)

    async def main() -> Sample:
        recorder, tally = latency.Recorder(count), Tally()
        jobs = Registry()

        @jobs.handler(JOB_TYPE, timeout=60)
        async def record(payload: Any, ctx: Any) -> None:
            recorder.hit(payload)
            tally.hit(ctx.id)

        options = {} if linger is None else {"linger": linger}
        async with worker(url, jobs, "pg_net", **options):
            proc = latency.start_paced("bench.jk_extra:single_enqueuer", url, float(count), count)
            await latency.wait_done(recorder, proc, timeout=30)
        return latency.summarize(recorder, verify.jobkit(url, count, tally), float(count))

    return asyncio.run(main())


# ---- punctuality ---------------------------------------------------------------------------------

def punctuality(url: str, count: int, kind: str) -> Sample:
    """``count`` delayed jobs (run_at 0.5-8 s ahead) or retries (Retry(after=1-5 s)) through pg_net
    with no cron: how late each starts after it became due; p50 (value) and p99 in ms."""
    install_pg_net(url)
    rng = random.Random(42)

    async def main() -> Sample:
        late: dict[str, float] = {}
        due: dict[Any, float] = {}
        tally = Tally()
        jobs = Registry()

        @jobs.handler(JOB_TYPE, timeout=60)
        async def handle(payload: Any, ctx: Any) -> None:
            now = time.time()
            if payload["kind"] == "delayed":
                late[str(ctx.id)] = now - payload["due"]
            elif ctx.attempt == 1:
                due[ctx.id] = now + payload["after"]
                raise Retry("once more", after=payload["after"])
            else:
                late[str(ctx.id)] = now - due[ctx.id]
            tally.hit(ctx.id)

        async with worker(url, jobs, "pg_net"):
            new = []
            for _ in range(count):
                if kind == "delayed":
                    delay = rng.uniform(0.5, 8.0)
                    new.append(NewJob(JOB_TYPE, {"kind": kind, "due": time.time() + delay},
                                      delay=timedelta(seconds=delay)))
                else:
                    new.append(NewJob(JOB_TYPE, {"kind": kind, "after": rng.uniform(1.0, 5.0)}))
            await asyncio.to_thread(_enqueue_many, url, new)
            await _until(lambda: len(late) >= count, 60)
        ms = [max(v, 0.0) * 1000 for v in late.values()]
        check = verify.jobkit(url, count, tally, retried=count if kind == "retry" else 0)
        return Sample(percentile(ms, 50), check, {"p99_ms": percentile(ms, 99), "max_ms": max(ms),
                                                  "jobs": count, "kind": kind})

    return asyncio.run(main())


def _enqueue_many(url: str, jobs: list[NewJob]) -> None:
    with Database(url).session() as session:
        Lifecycle(session, "jobkit").enqueue_many(jobs)

