"""The driver `python -m bench --baseline` runs on each side, in that side's own virtualenv.

Run as a script (``python -I bench/baseline_driver.py FIGURE URL N``), never imported by the bench
package: it sees only the jobkit installed in the interpreter running it, through the public API
that exists since ede9fd6 (``jobkit.enqueue``, ``jobkit.enqueue_many``, ``jobkit.NewJob``,
``jobkit.Registry``, the ``jobkit deploy`` CLI) plus the Drainer and PostgresBackend, whose module
moved (``jobkit.drain`` / ``jobkit.backends.postgres`` at ede9fd6, ``jobkit.worker...`` since).

Prints one JSON object: {"value": jobs/s, "ok": bool, "detail": str, "jobkit": version}.
Figures: single (one jobkit.enqueue call, one transaction, per job), bulk (enqueue_many, 1,000 per
call), drain_fixed (concurrency 16, batch 100, prefetch 25), drain_defaults (Drainer(concurrency=16)
with that version's defaults). The drains time from the first handler call to drain()'s return.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

#: Whichever jobkit this interpreter has, used only through names every version since ede9fd6 has.
jobkit: Any = importlib.import_module("jobkit")

JOB_TYPE = "bench.noop"
BULK = 1000
FIXED = {"concurrency": 16, "batch_size": 100, "prefetch": 25}


def _drainer_classes() -> tuple[Any, Any]:
    try:
        drain = importlib.import_module("jobkit.worker.drain")
    except ImportError:  # ede9fd6
        drain = importlib.import_module("jobkit.drain")
    backend = getattr(jobkit, "PostgresBackend", None)
    if backend is None:  # ede9fd6
        backend = importlib.import_module("jobkit.backends.postgres").PostgresBackend
    return drain.Drainer, backend


def _jobs(lo: int, hi: int) -> list[Any]:
    return [jobkit.NewJob(JOB_TYPE, {"i": i}) for i in range(lo, hi)]


def _count(url: str, status: str | None = None) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        if status is None:
            row = conn.execute("select count(*) from jobkit.jobs").fetchone()
        else:
            row = conn.execute("select count(*) from jobkit.jobs where status = %s", (status,)).fetchone()
    return int(row[0]) if row else 0


def single(url: str, n: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for i in range(n):
            jobkit.enqueue(conn, JOB_TYPE, {"i": i})
        elapsed = time.perf_counter() - start
    return _enqueued(url, n, elapsed)


def bulk(url: str, n: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        _fill(conn, n)
        elapsed = time.perf_counter() - start
    return _enqueued(url, n, elapsed)


def _fill(conn: Any, n: int) -> None:
    for lo in range(0, n, BULK):
        jobkit.enqueue_many(conn, _jobs(lo, min(n, lo + BULK)))


def _enqueued(url: str, n: int, elapsed: float) -> dict[str, Any]:
    found = _count(url, "pending")
    return {"value": n / elapsed, "ok": found == n, "detail": f"{found:,} of {n:,} jobs pending"}


def drain(url: str, n: int, fixed: bool) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        _fill(conn, n)
        conn.execute("analyze jobkit.jobs")
    seen: list[Any] = []
    first: list[float] = []
    elapsed = asyncio.run(_drain(url, fixed, seen, first))
    done, unique = _count(url, "completed"), len(set(seen))
    ok = done == n and unique == n and len(seen) == n
    return {"value": n / elapsed, "ok": ok,
            "detail": f"{len(seen):,} handler calls, {unique:,} distinct, {done:,} of {n:,} completed"}


async def _drain(url: str, fixed: bool, seen: list[Any], first: list[float]) -> float:
    drainer_cls, backend_cls = _drainer_classes()
    jobs = jobkit.Registry()

    async def noop(payload: Any, ctx: Any) -> None:
        if not first:
            first.append(time.monotonic())
        seen.append(ctx.id)

    jobs.handler(JOB_TYPE, timeout=60)(noop)

    backend = backend_cls(url, max_size=4 if fixed else 8)  # as bench/jk.py: the CLI's pool at c=16
    await backend.open()
    try:
        drainer = drainer_cls(jobs, backend, **(FIXED if fixed else {"concurrency": 16}))
        await drainer.drain(JOB_TYPE, budget=timedelta(hours=1))
        end = time.monotonic()
        await drainer.shutdown(grace=timedelta(0))
    finally:
        await backend.close()
    return end - first[0] if first else float("inf")


def drain_fixed(url: str, n: int) -> dict[str, Any]:
    return drain(url, n, True)


def drain_defaults(url: str, n: int) -> dict[str, Any]:
    return drain(url, n, False)


FIGURES: dict[str, Callable[[str, int], dict[str, Any]]] = {
    "single": single, "bulk": bulk, "drain_fixed": drain_fixed, "drain_defaults": drain_defaults,
}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in FIGURES:
        print(f"usage: baseline_driver.py {{{','.join(FIGURES)}}} URL N", file=sys.stderr)
        return 2
    figure, url, n = argv[0], argv[1], int(argv[2])
    try:
        out = FIGURES[figure](url, n)
    except Exception as exc:  # noqa: BLE001 - reported to the harness as a failed sample
        out = {"value": None, "ok": False, "detail": f"error: {type(exc).__name__}: {exc}"}
    out["jobkit"] = getattr(jobkit, "__version__", "?")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
