"""Where the worker's lifecycle calls go, each one round trip: the database directly (postgres.py, the
fast default: lifecycle.py's Statements on a pool), Supabase's Data API through supabase-py
(supabase.py: the same steps as RPCs), or memory (memory.py: the same semantics in Python, for fast
unit tests of the Drainer and for users' own tests). All three pass tests/integration's conformance
suite.

The Backend protocol below is the one list of the lifecycle's steps (``steps()``). Each step has one
name everywhere: the protocol's method, lifecycle.Statements' method and its named query
(sql/queries/), the API schema's RPC wrapper (sql/api.sql), and each backend's method.
tests/unit/test_steps.py holds them to it."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

from ...jobs import (
    Claimed,
    Done,
    Failure,
    FlowRun,
    Job,
    JobResult,
    NewJob,
    Parent,
    StepRecord,
    TraceContext,
    WaitSpec,
    WorkerInfo,
)


class Backend(Protocol):
    """The job lifecycle as the worker needs it (async)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> UUID:
        """``trace_context``: the enqueuer's W3C trace context, handed back by ``claim``."""
        ...

    async def enqueue_many(self, jobs: Sequence[NewJob],
                           trace_context: TraceContext | None = None) -> list[UUID]: ...

    async def claim(self, job_type: str, limit: int, worker: str, lease: timedelta,
                    rate_key: str | None = None, max_attempts: int | None = None) -> list[Claimed]: ...

    async def complete(self, done: Sequence[Done]) -> set[UUID]: ...

    async def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]: ...

    async def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool: ...

    async def suspend(self, job_id: UUID, attempt: int, wait: WaitSpec) -> str | None:
        """End a running attempt in a wait (ctx.sleep & co, fenced; the attempt is not consumed):
        'waiting', 'pending' when what it waits for is there already (resolved at once), None when
        the attempt no longer holds the job."""
        ...

    async def emit(self, name: str, key: str | None = None, data: Any = None,
                   id: str | None = None) -> int:  # noqa: A002 - the emit's own id
        """Store an event (a new generation of its name and key; the same ``id`` again: the same
        event) and, in the same transaction, resolve the waits registered for it and enqueue one
        job per subscriber type. Returns the event's id."""
        ...

    async def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> set[UUID]: ...

    async def release(self, running: Sequence[tuple[UUID, int]]) -> set[UUID]: ...

    async def running_check(self, running: Sequence[tuple[UUID, int]]) -> dict[UUID, str]:
        """Of these running attempts, those that no longer hold their job -> the job's status now
        ('cancelled' when cancel_job stopped it; 'gone' when it was deleted)."""
        ...

    async def get(self, job_id: UUID) -> Job | None: ...

    async def state(self, job_id: UUID) -> JobResult | None:
        """What a waiting producer reads (jobkit.wait_async polls it)."""
        ...

    async def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        """Store what handlers reported (ctx.progress) on their running attempts (fenced)."""
        ...

    async def load_steps(self, job_ids: Sequence[UUID]) -> dict[tuple[UUID, str, int], Any]:
        """These jobs' completed durable steps: (job id, name, occurrence) -> result (decoded JSON)."""
        ...

    async def save_steps(self, steps: Sequence[StepRecord], hold: bool = False) -> set[tuple[UUID, int]]:
        """Record steps (completed, or failed with their error), fenced: a record is written only
        while its attempt holds its job; returns the (job id, attempt) pairs that held it. A
        completed step is never overwritten. ``hold``: also lock the held jobs until the statement's
        transaction ends (a transactional step's own transaction; one call is one transaction
        otherwise)."""
        ...

    async def create_flow(self, graph: Any, trace_context: TraceContext | None = None) -> FlowRun:
        """Insert a graph (a jobkit.Flow) whole: children blocked until their parents end."""
        ...

    async def parents(self, job_id: UUID) -> list[Parent]:
        """A job's parents in its graph (jobkit.flow) as they ended, with each edge's policy
        (ctx.parents); [] for a job that has none."""
        ...

    async def flow_state(self, flow_id: UUID) -> list[JobResult]:
        """A flow's jobs in the order it gave them, each with its status (jobkit.wait_flow_async
        polls it); results, errors and progress only once every job ended. [] for no such flow."""
        ...

    async def take_tokens(self, key: str, want: int) -> int: ...

    async def token_wait(self, key: str) -> float: ...

    async def due_count(self, job_type: str) -> int: ...

    async def due_types(self) -> list[str]: ...

    async def next_due(self, job_type: str) -> float | None:
        """Seconds (by the backend's clock) until the type's next pending job is due; <= 0 when one
        is due now, None when none is pending."""
        ...

    async def worker_keys(self) -> list[str]:
        """The secrets wake-up signatures may be made with (current first; during a rotation's
        grace period, the previous one too)."""
        ...

    async def ping(self) -> None:
        """Raise ConnectionFailed unless the backend answers."""
        ...

    async def record_types(self, types: Sequence[str]) -> None:
        """Record the job types this worker serves (once, when it starts): the CLI knows them."""
        ...

    async def worker_beat(self, worker: WorkerInfo, running: int) -> None:
        """This worker's heartbeat (presence.py): upsert its row of the workers table, with the
        number of jobs it holds now."""
        ...

    async def worker_gone(self, worker_id: str) -> None:
        """This worker stops (a clean shutdown): its row is marked gone."""
        ...

    async def consume_wake(self, nonce: str, expires_at: datetime) -> bool:
        """Accept a signed wake-up once per fleet: True the first time ``nonce`` (its signature) is
        consumed, False for every repeat, in any worker process, also after a restart."""
        ...

    async def wake_draining(self, job_type: str, until: timedelta) -> None:
        """This worker drains ``job_type``: enqueues of it send no wake-up for ``until``."""
        ...

    async def wake_idle(self, job_type: str, handoff: bool = False) -> bool:
        """This worker's drain of ``job_type`` ended: False while an enqueue that relied on a drain
        is still in flight (look for jobs again, then retry). ``handoff`` (stopping): mark idle in
        any case and wake another worker for what is due."""
        ...


BACKEND_ONLY = frozenset({"open", "close"})  # a backend's own life, not a lifecycle step


def steps() -> tuple[str, ...]:
    """The lifecycle steps, in the protocol's order: Backend's methods besides open and close."""
    return tuple(name for name, value in vars(Backend).items()
                 if inspect.iscoroutinefunction(value) and name not in BACKEND_ONLY)
