"""Issue 22 item 3: why jobkit stopped an attempt is one typed state (attempt.Interrupt), not two
flags. The tending loop can time a handler out and learn that its job was cancelled in one pass
(the beat's tick), before the runner resumes; whatever the order, the attempt ends once, in one
outcome, and the next job on the same runner is untouched.

Over the in-memory backend, whose cancellation check answers without yielding (the PostgreSQL
backend yields, so its runner resumes in between). ``_cancel`` does what cancel_job does to it."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.worker.attempt import Ended, Interrupt, Outcome, Raised, Returned, settle, stronger
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.drain import Drainer, DrainSummary
from jobkit.worker.metrics import Quiet


class _Counts(Quiet):
    def __init__(self) -> None:
        self.failed_calls: list[str] = []
        self.completed_calls: list[str] = []

    def failed(self, job_type: str, final: bool) -> None:
        self.failed_calls.append(job_type)

    def completed(self, job_type: str, count: int) -> None:
        self.completed_calls.extend([job_type] * count)


def _cancel(backend: MemoryBackend, job_id: Any) -> None:
    """cancel_job on a processing job: cancelled, its attempt recorded as such."""
    row = backend.rows[job_id]
    row.status, row.lease_expires_at, row.completed_at = "cancelled", None, backend.clock()
    backend._record(row, "cancelled", None)


def _run(sync: bool, second: str) -> tuple[DrainSummary, MemoryBackend, list[Any], _Counts]:
    """Job A's handler runs past its timeout and is cancelled; tending learns both in one pass.
    Then job B runs on the same runner (concurrency 1): it returns, or raises its own
    CancelledError (``second``)."""
    jobs, backend, counts = Registry(), MemoryBackend(), _Counts()
    started = threading.Event()

    def first(ctx: Any) -> None:
        started.set()
        deadline = time.monotonic() + 5
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)

    if sync:
        @jobs.handler("t", timeout=60)
        def handler_sync(payload: dict[str, str], ctx: Any) -> str:
            if payload["n"] == "a":
                first(ctx)
                return "late"
            if second == "raises":
                raise asyncio.CancelledError("its own")
            return "b"
    else:
        @jobs.handler("t", timeout=60)
        async def handler_async(payload: dict[str, str], ctx: Any) -> str:
            if payload["n"] == "a":
                started.set()
                await asyncio.sleep(60)
            if second == "raises":
                raise asyncio.CancelledError("its own")
            return "b"

    ids = asyncio.run(backend.enqueue_many([NewJob("t", {"n": "a"}), NewJob("t", {"n": "b"})]))

    async def main() -> DrainSummary:
        drainer = Drainer(jobs, backend, concurrency=1, observer=counts)
        try:
            drain = asyncio.create_task(drainer.drain("t", budget=timedelta(seconds=10)))
            await asyncio.to_thread(started.wait, 5)
            _cancel(backend, ids[0])
            tending = drainer._tending
            assert tending.abandon_overdue(now=math.inf) == 1  # A is past its timeout...
            assert await tending.check_cancelled() == 1  # ...and cancelled: both in one pass
            return await asyncio.wait_for(drain, 10)
        finally:
            await drainer.shutdown(timedelta(seconds=1))

    return asyncio.run(main()), backend, ids, counts


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("second", ["returns", "raises"])
def test_timed_out_and_cancelled_in_one_pass(sync: bool, second: str, caplog: pytest.LogCaptureFixture) -> None:
    """A is cancelled (cancel_job recorded it: its timeout adds nothing) in the job row, its
    history, the drain's summary, the metrics and the log; B's attempt is B's own. (With the two
    flags, an async A's runner was cancelled twice and uncancelled once: B's own CancelledError
    was taken for jobkit's, its runner ended, and B stayed processing, its lease extended, until
    the worker's shutdown released it: its attempt was never recorded.)"""
    caplog.set_level(logging.WARNING, "jobkit.worker")
    summary, backend, (a, b), counts = _run(sync, second)
    assert backend.rows[a].status == "cancelled"
    assert [h.outcome for h in backend.history(a)] == ["cancelled"]
    assert summary.cancelled == 1 and summary.claimed == 2
    assert not any(str(a) in r.getMessage() for r in caplog.records)  # no failure logged for A
    if second == "returns":
        assert backend.rows[b].status == "completed" and summary.completed == 1 and summary.failed == 0
        assert counts.completed_calls == ["t"] and counts.failed_calls == []
    else:
        assert backend.rows[b].status == "pending"  # B's attempt failed (retried): recorded
        assert [h.outcome for h in backend.history(b)] == ["retry"]
        assert summary.failed == 1 and counts.failed_calls == ["t"] and summary.completed == 0


@pytest.mark.parametrize("first, second", [
    (Interrupt.TIMED_OUT, Interrupt.CANCELLED), (Interrupt.SHUTDOWN, Interrupt.TIMED_OUT),
    (Interrupt.SHUTDOWN, Interrupt.CANCELLED),
])
def test_the_stronger_interrupt_wins_whatever_the_order(first: Interrupt, second: Interrupt) -> None:
    assert stronger(stronger(None, first), second) is second
    assert stronger(stronger(None, second), first) is second
    assert stronger(first, first) is first


def test_the_outcome_comes_from_how_the_handler_ended_and_why_it_was_stopped() -> None:
    returned, raised = Returned('"x"'), Raised(ValueError("boom"))
    cases: list[tuple[Ended | None, Interrupt | None, Ended | Outcome]] = [
        (returned, None, returned), (raised, None, raised),
        (returned, Interrupt.TIMED_OUT, returned),  # it ended by itself past its timeout: kept
        (None, Interrupt.CANCELLED, Outcome.CANCELLED), (returned, Interrupt.CANCELLED, Outcome.CANCELLED),
        (None, Interrupt.SHUTDOWN, Outcome.RELEASED), (None, None, Outcome.RELEASED),
        (returned, Interrupt.SHUTDOWN, returned),
    ]
    for ended, interrupt, expected in cases:
        assert settle(ended, interrupt, 3.0) == expected, (ended, interrupt)
    timed_out = settle(None, Interrupt.TIMED_OUT, 3.0)
    assert isinstance(timed_out, Raised) and isinstance(timed_out.error, TimeoutError)
    assert str(timed_out.error) == "handler timed out after 3s; the attempt was abandoned"
