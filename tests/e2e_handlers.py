"""Handlers for the end-to-end tests, served by real `jobkit worker serve` processes.

They record what they do in tables of the test database (E2E_DB_URL) so the tests can check
starts, side effects and ordering from outside the worker process.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

import jobkit
import psycopg
from jobkit.config import Backoff

jobs = jobkit.Registry()
FAST = Backoff(base=timedelta(seconds=1), factor=1.0, cap=timedelta(seconds=1), jitter=0.0)


def _record(sql: str, *params: Any) -> None:
    with psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True) as conn:
        conn.execute(sql, params)


@jobs.handler("e2e.ok")
async def ok(payload: Any, ctx: Any) -> Any:
    return {"echo": payload, "attempt": ctx.attempt}


@jobs.handler("e2e.fail", max_attempts=2, backoff=FAST)
def fail(payload: Any, ctx: Any) -> None:
    raise RuntimeError(f"upstream refused (attempt {ctx.attempt})")


@jobs.handler("e2e.slow", timeout=60, lease=5)
async def slow(payload: Any, ctx: Any) -> Any:
    """A side effect guarded by the idempotency key, then a long wait."""
    await asyncio.to_thread(_record, "insert into side_effects (key, job_id) values (%s, %s) "
                            "on conflict (key) do nothing", ctx.idempotency_key, str(ctx.id))
    await asyncio.sleep(float(payload.get("seconds", 3)))
    return {"done": ctx.idempotency_key}


@jobs.handler("e2e.limited", rate_limit="e2e-api")
async def limited(payload: Any, ctx: Any) -> None:
    await asyncio.to_thread(_record, "insert into starts (job_id, at) values (%s, clock_timestamp())",
                            str(ctx.id))


@jobs.handler("e2e.progress", timeout=30)
def progress(payload: Any, ctx: Any) -> Any:
    """A tight loop reporting progress as fast as it can for payload["seconds"]."""
    import time

    started = time.monotonic()
    calls = 0
    while (elapsed := time.monotonic() - started) < float(payload["seconds"]):
        calls += 1
        ctx.progress(min(elapsed / float(payload["seconds"]), 1.0), message=f"call {calls}", data={"calls": calls})
    ctx.progress((calls, calls), message="done", data={"calls": calls})
    return {"calls": calls, "seconds": time.monotonic() - started}
