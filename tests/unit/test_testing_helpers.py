"""jobkit.testing: the inline queue runs handlers through the real Drainer (retries with backoff,
Retry, RateLimited, Permanent, typed payloads, max_attempts) without a database or a worker, and
jumps its clock over backoff instead of waiting."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import jobkit
import pytest
from jobkit.config import Backoff, TypeConfig
from jobkit.exceptions import JobkitError, NotFound
from jobkit.jobs import Status
from jobkit.testing import InlineQueue
from pydantic import BaseModel

HOUR = Backoff(base=timedelta(hours=1), factor=1, cap=timedelta(hours=1), jitter=0)


class Order(BaseModel):
    id: int
    amount: float


def _jobs() -> jobkit.Registry:
    jobs = jobkit.Registry()
    limited_seen: list[Any] = []

    @jobs.handler("flaky", backoff=HOUR, max_attempts=3)
    def flaky(payload: Any, ctx: Any) -> dict[str, int]:
        if ctx.attempt < 3:
            raise ConnectionError(f"down on attempt {ctx.attempt}")
        ctx.progress((1, 1), "sent")
        return {"attempt": ctx.attempt}

    @jobs.handler("always", max_attempts=2)
    async def always(payload: Any, ctx: Any) -> None:
        raise RuntimeError("nope")

    @jobs.handler("bad_input", max_attempts=5)
    async def bad_input(payload: Any, ctx: Any) -> None:
        raise jobkit.Permanent("invalid recipient")

    @jobs.handler("limited", max_attempts=1)
    async def limited(payload: Any, ctx: Any) -> str:
        if not limited_seen:  # the first run only: a 429
            limited_seen.append(ctx.id)
            raise jobkit.RateLimited(retry_after=600)
        return "through"

    @jobs.handler("order", payload=Order)
    def order(payload: Order, ctx: Any) -> float:
        return payload.amount * 2

    return jobs


def test_retries_run_through_the_real_backoff_without_waiting() -> None:
    queue = InlineQueue(_jobs())
    job_id = queue.enqueue("flaky", {})
    started = time.monotonic()
    assert queue.run() == 3
    assert time.monotonic() - started < 30  # two hours of backoff were jumped over, not waited
    done = queue.result(job_id)
    assert (done.status, done.result, done.attempts) == (Status.COMPLETED, {"attempt": 3}, 3)
    assert done.progress is not None and done.progress.message == "sent"
    assert [a.outcome for a in queue.history(job_id)] == ["retry", "retry", "completed"]
    assert queue.clock.ahead >= 2 * 3600  # the clock jumped over both backoffs


def test_failures_permanent_failures_snoozes_and_typed_payloads() -> None:
    queue = InlineQueue(_jobs(), types={"always": TypeConfig(backoff=HOUR)})
    failing = queue.enqueue("always", {})
    permanent = queue.enqueue("bad_input", {})
    snoozed = queue.enqueue("limited", {})
    typed = queue.enqueue("order", Order(id=1, amount=2.5))
    untyped = queue.enqueue("order", {"id": "x"})
    queue.run()
    assert (queue.result(failing).status, queue.result(failing).attempts) == (Status.FAILED, 2)
    assert "nope" in (queue.result(failing).error or "")
    assert (queue.result(permanent).status, queue.result(permanent).attempts) == (Status.FAILED, 1)
    assert queue.result(snoozed).result == "through"  # a snooze used no attempt (max_attempts=1)
    assert queue.result(typed).result == 5.0
    bad = queue.result(untyped)
    assert (bad.status, bad.attempts) == (Status.FAILED, 1) and "(Order): id: " in (bad.error or "")
    with pytest.raises(NotFound):
        queue.result(uuid.uuid4())


def test_registry_run_inline_returns_the_final_state() -> None:
    jobs = _jobs()
    assert jobs.run_inline("flaky", {}).result == {"attempt": 3}
    assert jobs.run_inline("order", Order(id=2, amount=1)).result == 2.0
    assert jobs.run_inline("always", {}).status == Status.FAILED
    nobody = jobs.run_inline("unknown", {}, max_attempts=1)
    assert nobody.status == Status.FAILED and "no handler for job type 'unknown'" in (nobody.error or "")


def test_a_job_that_never_settles_is_reported() -> None:
    jobs = jobkit.Registry()

    @jobs.handler("forever")
    async def forever(payload: Any, ctx: Any) -> None:
        raise jobkit.RateLimited(retry_after=1)

    queue = InlineQueue(jobs)
    queue.enqueue("forever", {})
    with pytest.raises(JobkitError, match="still pending after 5 rounds"):
        queue.run(max_rounds=5)
