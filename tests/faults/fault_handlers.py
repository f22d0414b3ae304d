"""Handlers for the fault suite, served by real `jobkit worker serve` processes (cwd tests/faults).

Every run records a side effect (job id, attempt, process id) in the test database's
side_effects table before it does anything else, so a test can count how often each job ran."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import jobkit
import psycopg
from jobkit.config import Backoff
from jobkit.jobs import NewJob

jobs = jobkit.Registry()
QUICK = Backoff(base=timedelta(seconds=1), factor=1.0, cap=timedelta(seconds=1), jitter=0.0)
_local = threading.local()


def side_effect(ctx: Any) -> None:
    """Insert (job id, attempt, pid) into side_effects on this thread's own connection."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True)
    try:
        conn.execute("insert into side_effects (job_id, attempt, pid) values (%s, %s, %s)",
                     (str(ctx.id), ctx.attempt, os.getpid()))
    except psycopg.OperationalError:  # the server restarted: a new connection, once
        _local.conn = psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True)
        _local.conn.execute("insert into side_effects (job_id, attempt, pid) values (%s, %s, %s)",
                            (str(ctx.id), ctx.attempt, os.getpid()))


@jobs.handler("fault.work", timeout=30, lease=5, backoff=QUICK)
def work(payload: Any, ctx: Any) -> Any:
    side_effect(ctx)
    time.sleep(float(payload.get("seconds", 0.05)))
    return {"attempt": ctx.attempt, "pid": os.getpid()}


@jobs.handler("fault.crash", timeout=30, lease=5, max_attempts=2, backoff=QUICK)
def crash(payload: Any, ctx: Any) -> None:
    """Takes the whole process down on every attempt."""
    side_effect(ctx)
    os._exit(3)


@jobs.handler("fault.sysexit", max_attempts=1)
def sysexit(payload: Any, ctx: Any) -> None:
    """sys.exit() in a handler: it ends this attempt, not the worker."""
    raise SystemExit(3)


@jobs.handler("fault.keyed", timeout=30, lease=5, backoff=QUICK)
def keyed(payload: Any, ctx: Any) -> Any:
    """A job of a fair type with a per-key limit (tests/faults/test_concurrency_keys.py); with
    fail_first, its first attempt fails (it is retried a second later)."""
    side_effect(ctx)
    time.sleep(float(payload.get("seconds", 0.01)))
    if payload.get("fail_first") and ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return None


def _starts(job_id: str) -> int:
    with psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True) as conn:
        row = conn.execute("select count(*) from side_effects where job_id = %s", (job_id,)).fetchone()
        return int(row[0]) if row else 0


@jobs.handler("fault.sleepy", timeout=300, lease=5, backoff=QUICK)
def sleepy(payload: Any, ctx: Any) -> Any:
    """A long sync handler (tests/faults/test_shutdown.py): records its start, sleeps
    payload["seconds"] on its first start only (a second start of the same job is quick), then
    records its end in side_effect_ends. A start without an end was cut off by its process's exit."""
    side_effect(ctx)
    first = _starts(str(ctx.id)) == 1
    time.sleep(float(payload.get("seconds", 0.05)) if first else 0.05)
    with psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True) as conn:
        conn.execute("insert into side_effect_ends (job_id, pid) values (%s, %s)", (str(ctx.id), os.getpid()))
    return {"pid": os.getpid()}


STEPS = 5


def step_effect(ctx: Any, step: str) -> None:
    """Insert (job id, step, attempt, pid) into step_effects: one row per run of a durable step."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["E2E_DB_URL"], autocommit=True)
    conn.execute("insert into step_effects (job_id, step, attempt, pid) values (%s, %s, %s, %s)",
                 (str(ctx.id), step, ctx.attempt, os.getpid()))


@jobs.handler("fault.steps", timeout=30, lease=5, max_attempts=5, backoff=QUICK)
def durable(payload: Any, ctx: Any) -> Any:
    """Five durable steps, each recording a side effect and taking a while; as long again between
    them, so that a kill lands inside a step or between two about as often."""
    pause = float(payload.get("seconds", 0.02))

    def run(step: str) -> str:
        step_effect(ctx, step)
        time.sleep(pause)
        return f"{step} by {os.getpid()}"

    done = []
    for i in range(STEPS):
        done.append(ctx.step(f"s{i}", run, f"s{i}"))
        time.sleep(pause)
    return done


@jobs.handler("fault.sleeper", timeout=30, lease=5, backoff=QUICK)
async def sleeper(payload: Any, ctx: Any) -> Any:
    """Sleeps payload["for"] seconds, or until payload["until"] (a Unix time), holding no worker
    (issue 25), then completes. Records a side effect per run: a job that slept once ran twice
    (before its sleep, and replayed after it)."""
    await asyncio.to_thread(side_effect, ctx)
    if "until" in payload:
        await ctx.sleep_until(datetime.fromtimestamp(float(payload["until"]), UTC))
    else:
        await ctx.sleep(float(payload.get("for", 3)))
    return "slept"


@jobs.handler("fault.waiter", timeout=30, lease=5, backoff=QUICK)
async def waiter(payload: Any, ctx: Any) -> Any:
    """Waits for the event fault.go with its key (issue 25); returns the event's data. A side
    effect per run, as fault.sleeper."""
    await asyncio.to_thread(side_effect, ctx)
    got = await ctx.wait_for_event("fault.go", key=payload["key"], timeout="10m")
    return None if got is None else got.data


@jobs.handler("fault.parent", timeout=30, lease=5, backoff=QUICK)
def parent(payload: Any, ctx: Any) -> Any:
    """Starts its children (payload["children"]: {"type", "payload", "delay"} each) in a durable
    step, takes payload["pause"] seconds, then waits for them holding no worker
    (ctx.wait_for_jobs); returns {child id: status}.
    A side effect per run, as fault.sleeper; each child's payload names its parent."""
    side_effect(ctx)

    def spawn() -> list[str]:
        made = [NewJob(c["type"], {**c.get("payload", {}), "parent": str(ctx.id)},
                       delay=timedelta(seconds=c["delay"]) if c.get("delay") else None,
                       idempotency_key=f"{ctx.id}:{n}")
                for n, c in enumerate(payload["children"])]
        return [str(i) for i in jobkit.enqueue_many(os.environ["E2E_DB_URL"], made)]

    children = ctx.step("spawn", spawn)
    time.sleep(float(payload.get("pause", 0)))  # the children may finish meanwhile
    states = ctx.wait_for_jobs(children)
    return {str(child): status for child, status in states.items()}  # keyed by UUIDs


@jobs.handler("fault.child", timeout=30, lease=5, backoff=QUICK)
def child(payload: Any, ctx: Any) -> Any:
    """A child of fault.parent: takes payload["seconds"], then completes, or fails for good
    (jobkit.Permanent: no retry) when payload["fail"]."""
    side_effect(ctx)
    time.sleep(float(payload.get("seconds", 0)))
    if payload.get("fail"):
        raise jobkit.Permanent("this child was told to fail")
    return "done"
