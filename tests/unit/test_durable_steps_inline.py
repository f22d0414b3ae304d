"""Durable steps (issue 25, item 1) on the inline queue (memory backend, the real Drainer): a
completed step is not run again on a retry, its stored result is returned, occurrences count per
name, step_key is stable across attempts, per-step retries and timeouts, a failed step keeps its
error, a stale attempt's record is refused (fenced)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import jobkit
import pytest
from jobkit.exceptions import ConfigError
from jobkit.jobs import NewJob, StepRecord
from jobkit.testing import InlineQueue
from jobkit.worker.backends.memory import MemoryBackend


def _registry(runs: Counter[str], keys: list[str]) -> jobkit.Registry:
    jobs = jobkit.Registry()

    @jobs.handler("order", max_attempts=3)
    async def order(payload: Any, ctx: Any) -> dict[str, Any]:
        async def charge(amount: int) -> dict[str, Any]:
            runs["charge"] += 1
            keys.append(ctx.step_key("charge"))
            return {"charged": amount, "at": (1, 2)}

        charged = await ctx.step("charge", charge, payload["amount"])
        first = await ctx.step("note", lambda: runs.update(["note"]) or "a")
        second = await ctx.step("note", lambda: runs.update(["note"]) or "b")
        if ctx.attempt < 3:
            raise ConnectionError(f"down after the steps, attempt {ctx.attempt}")
        return {"charged": charged, "notes": [first, second]}

    @jobs.handler("sync_order", max_attempts=2)
    def sync_order(payload: Any, ctx: Any) -> Any:
        got = ctx.step("reserve", lambda n: runs.update(["reserve"]) or n * 2, 21)
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return got

    return jobs


def test_a_completed_step_is_not_run_again_and_returns_its_stored_result() -> None:
    runs: Counter[str] = Counter()
    keys: list[str] = []
    queue = InlineQueue(_registry(runs, keys))
    job_id = queue.enqueue("order", {"amount": 5})
    queue.run()
    state = queue.result(job_id)
    assert state.status == "completed" and state.attempts == 3
    # the tuple came back as stored JSON (a list), on the first attempt and on the replays alike
    assert state.result == {"charged": {"charged": 5, "at": [1, 2]}, "notes": ["a", "b"]}
    assert runs == Counter({"charge": 1, "note": 2})
    assert keys == [f"jobkit:{job_id}:charge:1"]
    stored = {(n, o): r for (j, n, o), r in queue.backend.steps.items() if j == job_id}
    assert set(stored) == {("charge", 1), ("note", 1), ("note", 2)}
    assert all(r.attempt == 1 and r.error is None for r in stored.values())


def test_sync_handlers_call_ctx_step_without_await() -> None:
    runs: Counter[str] = Counter()
    queue = InlineQueue(_registry(runs, []))
    job_id = queue.enqueue("sync_order", {})
    queue.run()
    assert queue.result(job_id).result == 42 and runs["reserve"] == 1


def _flaky_registry(calls: Counter[str]) -> jobkit.Registry:
    jobs = jobkit.Registry()

    @jobs.handler("retried", max_attempts=1)
    async def retried(payload: Any, ctx: Any) -> Any:
        def flaky() -> str:
            calls["flaky"] += 1
            if calls["flaky"] < 3:
                raise ConnectionError(f"try {calls['flaky']}")
            return "ok"
        return await ctx.step("flaky", flaky, retries=3, backoff=0)

    @jobs.handler("exhausted", max_attempts=2)
    async def exhausted(payload: Any, ctx: Any) -> Any:
        def broken() -> None:
            calls["broken"] += 1
            raise ValueError("card declined")
        return await ctx.step("broken", broken, retries=1, backoff=0)

    @jobs.handler("slow", max_attempts=1)
    async def slow(payload: Any, ctx: Any) -> Any:
        async def sleepy() -> None:
            calls["slow"] += 1
            await asyncio.sleep(5)
        return await ctx.step("slow", sleepy, timeout=0.05)

    @jobs.handler("slow_in_async", max_attempts=1)
    async def slow_in_async(payload: Any, ctx: Any) -> Any:
        return await ctx.step("slow", time.sleep, 1, timeout=0.05)  # a sync fn: in a thread

    @jobs.handler("slow_sync", max_attempts=1)
    def slow_sync(payload: Any, ctx: Any) -> Any:
        return ctx.step("slow", time.sleep, 1, timeout=0.05)

    @jobs.handler("bad_result", max_attempts=3)
    async def bad_result(payload: Any, ctx: Any) -> Any:
        return await ctx.step("set", lambda: {1, 2})

    return jobs


def test_a_step_retries_in_process_before_failing_the_attempt() -> None:
    calls: Counter[str] = Counter()
    queue = InlineQueue(_flaky_registry(calls))
    ok = queue.enqueue("retried", {})
    bad = queue.enqueue("exhausted", {})
    queue.run()
    assert queue.result(ok).status == "completed" and queue.result(ok).attempts == 1
    assert calls["flaky"] == 3
    assert [r.tries for (j, _n, _o), r in queue.backend.steps.items() if j == ok] == [3]
    state = queue.result(bad)
    assert state.status == "failed" and "card declined" in (state.error or "")
    assert calls["broken"] == 4  # two tries in each of the two attempts
    (failed,) = [r for (j, _n, _o), r in queue.backend.steps.items() if j == bad]
    assert failed.error is not None and "card declined" in failed.error and failed.result is None
    assert asyncio.run(queue.backend.load_steps([bad])) == {}  # a failed step runs again


def test_a_step_timeout_fails_it() -> None:
    calls: Counter[str] = Counter()
    queue = InlineQueue(_flaky_registry(calls))
    ids = [queue.enqueue("slow", {}), queue.enqueue("slow_sync", {}), queue.enqueue("slow_in_async", {})]
    queue.run()
    for job_id in ids:
        state = queue.result(job_id)
        assert state.status == "failed" and "TimeoutError" in (state.error or "")


def test_a_result_that_is_not_json_fails_the_attempt_for_good() -> None:
    queue = InlineQueue(_flaky_registry(Counter()))
    job_id = queue.enqueue("bad_result", {})
    queue.run()
    state = queue.result(job_id)
    assert state.status == "failed" and state.attempts == 1 and "not JSON-serializable" in (state.error or "")


def test_bad_step_arguments_name_the_fix() -> None:
    jobs = jobkit.Registry()
    seen: list[str] = []

    @jobs.handler("bad", max_attempts=1)
    async def bad(payload: Any, ctx: Any) -> None:
        for call in (lambda: ctx.step("", print), lambda: ctx.step("x", print, retries=-1),
                     lambda: ctx.step("x", print, timeout=0), lambda: ctx.step("x", "nope"),
                     lambda: ctx.step_key("")):
            with pytest.raises(ConfigError) as caught:
                call()
            seen.append(caught.value.hint)
        with pytest.raises(ConfigError, match="direct PostgreSQL"):
            await ctx.transaction_step("tx", lambda conn: None)

    queue = InlineQueue(jobs)
    job_id = queue.enqueue("bad", {})
    queue.run()
    assert queue.result(job_id).status == "completed", queue.result(job_id).error
    assert len(seen) == 5 and all(seen)


def test_a_stale_attempt_cannot_write_or_overwrite_a_step() -> None:
    async def scenario() -> None:
        backend = MemoryBackend()
        job_id = await backend.enqueue(NewJob("t", {}))
        (first,) = await backend.claim("t", 1, "w", lease=timedelta(seconds=5))
        now = datetime.now(UTC)
        a1 = first.attempts
        assert await backend.save_steps([StepRecord(job_id, a1, "a", 1, '"one"', None, 1, now)]) == {(job_id, a1)}
        backend.clock = lambda: time.time() + 60  # the lease expires; the sweep gives it back
        backend.sweep_stuck()
        backend.rows[job_id].scheduled_for = 0
        (second,) = await backend.claim("t", 1, "w2", lease=timedelta(seconds=5))
        a2 = second.attempts
        assert a2 == a1 + 1
        stale = StepRecord(job_id, a1, "b", 1, '"stale"', None, 1, now)
        again = StepRecord(job_id, a2, "a", 1, '"two"', None, 1, now)
        # in one batch: the stale record is refused, the held one kept, a completed step not overwritten
        assert await backend.save_steps([stale, again]) == {(job_id, a2)}
        assert await backend.load_steps([job_id, uuid4()]) == {(job_id, "a", 1): "one"}
        assert await backend.save_steps([]) == set() and await backend.load_steps([]) == {}

    asyncio.run(scenario())


def test_an_attempt_that_lost_its_job_gets_step_lost_and_stores_nothing() -> None:
    jobs = jobkit.Registry()
    seen: list[Any] = []

    @jobs.handler("fenced", max_attempts=3)
    async def fenced(payload: Any, ctx: Any) -> Any:
        def swept() -> str:  # meanwhile the job moved on to another attempt
            queue.backend.rows[ctx.id].attempts += 1
            return "late"
        try:
            await ctx.step("late", swept)
        except jobkit.StepLost as exc:
            seen.append((ctx.lost, exc.hint))
            raise
        return "unreachable"

    queue = InlineQueue(jobs)
    job_id = queue.enqueue("fenced", {})
    queue.run()
    assert seen and seen[0][0] is True and "lease" in seen[0][1]
    assert queue.backend.steps == {}
    assert queue.result(job_id).status == "processing"  # the other attempt holds it; nothing recorded
