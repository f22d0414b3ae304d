"""The records of the job lifecycle: a Job and its states (mirroring the jobs table of
sql/schema.sql), a job to enqueue, a claimed job, an outcome to record, an attempt in the history."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple
from uuid import UUID

#: A W3C trace context as an OpenTelemetry propagator writes it ({"traceparent": ..., "tracestate": ...}).
TraceContext = dict[str, str]


class Status(StrEnum):
    #: waiting to run; runnable once scheduled_for <= now()
    PENDING = "pending"
    #: claimed by a worker; its lease runs until lease_expires_at
    PROCESSING = "processing"
    #: finished; the handler's result is stored
    COMPLETED = "completed"
    #: out of attempts or failed permanently; sweep_dead moves it to dead
    FAILED = "failed"
    #: dead-lettered for manual review; retry_job revives it
    DEAD = "dead"
    #: stopped by cancel_job
    CANCELLED = "cancelled"
    #: a durable job waiting (ctx.sleep, wait_for_event, wait_for_jobs): pending again when it ends
    WAITING = "waiting"
    #: a job of a graph (jobkit.flow) whose parents have not all ended, or whose flow is paused
    BLOCKED = "blocked"


@dataclass(frozen=True)
class Job:
    """One row of the jobs table."""

    id: UUID
    type: str
    payload: Any
    status: Status
    priority: int
    attempts: int
    max_attempts: int | None  # as enqueued; None: the handler's, else the type's setting
    last_error: str | None
    result: Any
    scheduled_for: datetime
    started_at: datetime | None
    completed_at: datetime | None
    created_at: datetime
    lease_expires_at: datetime | None
    worker_id: str | None
    idempotency_key: str | None
    updated_at: datetime
    handler_max_attempts: int | None = None  # the max_attempts of the handler that last claimed it
    round_start: int = 0  # attempts used before the last retry_job (a fresh round)
    trace_context: TraceContext | None = None  # the enqueuer's, when it traced (see tracing.py)
    concurrency_key: str | None = None  # its key (fair types: per-key limits, round-robin claims)
    progress: dict[str, Any] | None = None  # what the handler last reported (ctx.progress)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        fields = {name: row[name] for name in cls.__dataclass_fields__ if name in row}
        fields["status"] = Status(fields["status"])
        return cls(**fields)


class Claimed(NamedTuple):
    """A job as a worker claimed it: what its handler may need, nothing more (the claim decodes
    these eight columns instead of the whole row; timestamps cost the most)."""

    id: UUID
    type: str
    attempts: int  # this claim's attempt number (counts on after retry_job; the fencing token)
    max_attempts: int  # the number of this round's last attempt
    priority: int
    payload: Any
    idempotency_key: str | None
    trace_context: TraceContext | None = None  # the enqueuer's (the worker's spans continue its trace)


class NewJob(NamedTuple):
    """A job to enqueue; None fields take the database defaults. (A NamedTuple: building a
    thousand of them for a bulk enqueue costs a third of what frozen dataclasses did.)"""

    type: str
    payload: Any
    priority: int | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    delay: timedelta | None = None  # run at the database's now() + delay (when run_at is None)
    concurrency_key: str | None = None  # None: the type's concurrency_key template, if any
    debounce: timedelta | None = None  # replace the key's pending job; run this long after the last enqueue
    throttle: timedelta | None = None  # one job per key per window; later enqueues get its id


@dataclass(frozen=True)
class Failure:
    """A failed attempt to record."""

    id: UUID
    attempt: int
    error: str
    retry_in: timedelta | None = None
    permanent: bool = False


#: A completed attempt to record: (job id, attempt, the result as JSON text; None = null).
Done = tuple[UUID, int, str | None]


class StepRecord(NamedTuple):
    """One durable step's record (ctx.step), written fenced by its attempt: completed when ``error``
    is None (``result`` its JSON text, None for null), else failed with that error."""

    job_id: UUID
    attempt: int
    name: str
    occurrence: int  # the n-th call of this name within one execution of the handler
    result: str | None
    error: str | None
    tries: int
    started_at: datetime


class WaitSpec(NamedTuple):
    """What a waiting handler waits for (ctx.sleep, wait_for_event, wait_any, wait_for_jobs): its
    step (name, occurrence: its outcome is stored as that step), its kind ('sleep', 'event',
    'jobs'), the events (names with their keys, parallel; any one of them), the jobs (all of them)
    and its due time (a sleep's end, else the timeout; None: none): ``due`` a time, ``delay`` from
    the backend's now (both: the earlier)."""

    step: str
    occurrence: int
    kind: str
    due: datetime | None = None
    delay: timedelta | None = None
    events: tuple[str, ...] = ()
    keys: tuple[str | None, ...] = ()
    job_ids: tuple[UUID, ...] = ()


#: The states in which a job waits for nothing more: wait() returns or raises on them.
FINISHED = frozenset({Status.COMPLETED, Status.FAILED, Status.DEAD, Status.CANCELLED})


@dataclass(frozen=True)
class Progress:
    """What a handler reported with ``ctx.progress()``: a fraction from 0 to 1 (given, or done /
    total), the counts when given, a message and any JSON data."""

    fraction: float | None = None
    done: int | None = None
    total: int | None = None
    message: str | None = None
    data: Any = None

    @classmethod
    def from_json(cls, value: Any) -> Progress | None:
        if not isinstance(value, dict):
            return None
        return cls(value.get("fraction"), value.get("done"), value.get("total"), value.get("message"),
                   value.get("data"))

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class JobResult:
    """A job's state as a producer sees it (``jobkit.wait`` returns it once the job finished)."""

    id: UUID
    status: Status
    result: Any = None  # the handler's return value (completed jobs)
    error: str | None = None  # the last attempt's error (failed, dead; or an earlier failed try)
    attempts: int = 0
    progress: Progress | None = None
    completed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> JobResult:
        return cls(UUID(str(row["id"])), Status(row["status"]), row.get("result"), row.get("last_error"),
                   int(row.get("attempts") or 0), Progress.from_json(row.get("progress")),
                   row.get("completed_at"))


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job, from the job_history view."""

    attempt: int
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str
    error: str | None
    duration: timedelta | None


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as the workers table records it (0021): who it is, how it is woken, what it
    serves, and how often it writes its heartbeat."""

    id: str  # the worker id its claims write into jobs.worker_id
    host: str
    pid: int
    version: str
    transport: str  # 'pg_net' (woken over HTTP, POST /run) or 'notify' (LISTEN)
    concurrency: int
    types: tuple[str, ...]
    heartbeat: timedelta
    started_at: datetime


# ---- job graphs (jobkit.flow; toolkit/flows.py builds them) ----------------------------------------

@dataclass(frozen=True)
class FlowRun:
    """An inserted flow: its id and its jobs' ids in the order they were added."""

    id: UUID
    job_ids: list[UUID] = field(default_factory=list)

    def __getitem__(self, job: Any) -> UUID:
        """The id of a job of the flow, by the handle Flow.add returned (a jobkit.FlowJob)."""
        position: int = job.position
        return self.job_ids[position]


@dataclass(frozen=True)
class FlowResult:
    """A flow once every job of it ended (``jobkit.wait`` on a FlowRun, ``jobkit.wait_flow``): each
    job's JobResult in the order the flow gave them (a replayed job after them). A failed job is
    reported here, not raised: look at ``failed``, or ``ok``."""

    id: UUID
    jobs: list[JobResult] = field(default_factory=list)

    def __getitem__(self, job_id: UUID | str) -> JobResult:
        """One job's result by its id (``summary[run[handle]]`` for a handle Flow.add returned)."""
        wanted = str(job_id)
        for job in self.jobs:
            if str(job.id) == wanted:
                return job
        raise KeyError(job_id)

    @property
    def succeeded(self) -> list[JobResult]:
        return [j for j in self.jobs if j.status == Status.COMPLETED]

    @property
    def failed(self) -> list[JobResult]:
        """The jobs that failed, were dead-lettered or were cancelled."""
        return [j for j in self.jobs if j.status != Status.COMPLETED]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def counts(self) -> dict[str, int]:
        return {"succeeded": len(self.succeeded), "failed": len(self.failed)}


@dataclass(frozen=True, slots=True)
class Parent:
    """A parent of the running job, as it ended (``ctx.parents()``)."""

    id: UUID
    type: str
    status: str
    result: Any
    error: str | None
    on_parent_failure: str


@dataclass(frozen=True, slots=True)
class Gathered:
    """What a gather callback's parents ended with (``ctx.gathered()``)."""

    succeeded: list[UUID]
    failed: list[UUID]  # failed, dead or cancelled

    @property
    def counts(self) -> dict[str, int]:
        return {"succeeded": len(self.succeeded), "failed": len(self.failed)}


def gathered(parents: Sequence[Parent]) -> Gathered:
    return Gathered([p.id for p in parents if p.status == "completed"],
                    [p.id for p in parents if p.status != "completed"])
