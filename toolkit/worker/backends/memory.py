"""The job lifecycle in memory, with the same semantics as jobkit's SQL functions: claims in priority
then due-time order under a lease of at least 5 s, fencing on the attempt, the one max_attempts rule
(the job's, else the claiming handler's, else the type's, else the defaults', per round), backoff,
snoozes and releases that keep the attempt, idempotency keys, token buckets that bound claims.

For fast unit tests of the Drainer, retries and rate limits, and for users' own tests: no database,
one process. ``clock`` (Unix seconds) can be replaced to move time forward. It passes the same
conformance suite as the PostgreSQL and Data API backends (tests/integration/test_conformance.py).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ...config import EventConfig, RateLimitConfig, TypeConfig
from ...exceptions import DatabaseError
from ...jobs import (
    Attempt,
    Claimed,
    Done,
    Failure,
    FlowRun,
    Job,
    JobResult,
    NewJob,
    Parent,
    Status,
    StepRecord,
    TraceContext,
    WorkerInfo,
)
from ...lifecycle import flow_params
from ..attempt import Outcome
from .memory_waits import Waits, WaitsInMemory

MIN_LEASE = 5.0
DEFAULTS = TypeConfig()
Clock = Callable[[], float]


@dataclass
class _Row:
    """A row of the jobs table."""

    id: UUID
    type: str
    payload: str  # JSON text, as stored
    priority: int
    scheduled_for: float
    created_at: float
    max_attempts: int | None
    idempotency_key: str | None
    status: str = "pending"
    attempts: int = 0
    handler_max_attempts: int | None = None
    round_start: int = 0
    last_error: str | None = None
    result: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    lease_expires_at: float | None = None
    worker_id: str | None = None
    updated_at: float = 0.0
    concurrency_key: str | None = None
    history: list[Attempt] = field(default_factory=list)
    trace_context: TraceContext | None = None
    progress: dict[str, Any] | None = None
    flow_id: UUID | None = None  # job graphs (jobkit.flow): its flow; None for a plain job
    blocked_by: int | None = None  # a blocked child's parents that have not ended
    settled: bool = False  # a parent whose children were told it ended


@dataclass
class _Bucket:
    rate: float
    burst: int
    tokens: float
    at: float


class MemoryBackend(WaitsInMemory):
    """A Backend (see __init__.py) whose database is a dict."""

    def __init__(
        self,
        *,
        defaults: TypeConfig = DEFAULTS,
        types: Mapping[str, TypeConfig] | None = None,
        ratelimits: Mapping[str, RateLimitConfig] | None = None,
        secret: str | None = None,
        clock: Clock = time.time,
        seed: int | None = None,
        events: Mapping[str, EventConfig] | None = None,
    ) -> None:
        self.defaults = defaults
        self.types = dict(types or {})
        self.clock = clock
        self.secret = secret
        self.rows: dict[UUID, _Row] = {}
        self.known_types: set[str] = set()  # what workers recorded (record_types)
        #: the workers table (0021): worker id -> (its info, jobs held at its last beat, last beat
        #: by ``clock``, gone: None while it runs, else 'stopped')
        self.workers: dict[str, tuple[WorkerInfo, int, float, str | None]] = {}
        self._buckets = {
            k: _Bucket(c.rate, c.burst, float(c.burst), clock()) for k, c in (ratelimits or {}).items()
        }
        self._random = random.Random(seed)
        self._cursors: dict[str, str] = {}  # fair types: the last key a claim served
        self.wake_nonces: dict[str, datetime] = {}  # signed wake-ups consumed -> when their window ends
        #: the job_steps table: (job id, name, occurrence) -> its record (durable steps, ctx.step)
        self.steps: dict[tuple[UUID, str, int], StepRecord] = {}
        self.waits = Waits(config=dict(events or {}))  # job_waits, events, event_config (memory_waits.py)
        #: job graphs: the job_edges table both ways (id -> [(other id, policy)]), and paused flows
        self.children: dict[UUID, list[tuple[UUID, str]]] = {}
        self.parent_edges: dict[UUID, list[tuple[UUID, str]]] = {}
        self.flows: dict[UUID, bool] = {}  # flow id -> paused

    # ---- the Backend protocol ---------------------------------------------------------------------

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> UUID:
        return self._enqueue(job, trace_context)

    async def enqueue_many(self, jobs: Sequence[NewJob],
                           trace_context: TraceContext | None = None) -> list[UUID]:
        return [self._enqueue(j, trace_context) for j in jobs]

    async def claim(
        self,
        job_type: str,
        limit: int,
        worker: str,
        lease: timedelta,
        rate_key: str | None = None,
        max_attempts: int | None = None,
    ) -> list[Claimed]:
        if lease.total_seconds() < MIN_LEASE:
            raise DatabaseError("jobkit.claim_jobs: p_lease must be at least 5 seconds")
        now = self.clock()
        self._wake_due(job_type)  # waits whose time has come are pending now (as claim_jobs does)
        due = self._due(job_type, now)
        if self._config(job_type).fair:
            due = self._fair(job_type, due, max(limit, 0))
        key = rate_key or self._config(job_type).rate_limit
        want = min(max(limit, 0), len(due))
        if key is not None:
            want = self._take(key, want, now)
        claimed = [
            self._claim_one(r, worker, now + lease.total_seconds(), max_attempts, now) for r in due[:want]
        ]
        return claimed

    async def complete(self, done: Sequence[Done]) -> set[UUID]:
        results = {d[0]: _stored_json(d[2]) for d in done}  # refused as a whole, like one statement
        accepted = set()
        for job_id, attempt, _text in done:
            row = self._held(job_id, attempt)
            if row is not None:
                row.status, row.result, row.completed_at = "completed", results[job_id], self.clock()
                row.lease_expires_at, row.updated_at = None, self.clock()
                accepted.add(job_id)
        self._jobs_finished(list(accepted))
        self._settle([i for i in accepted if self.rows[i].flow_id is not None])
        return accepted

    async def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]:
        for f in failures:
            _stored_text(f.error)
        statuses = {}
        for f in failures:
            row = self._held(f.id, f.attempt)
            if row is not None:
                statuses[f.id] = self._fail_one(row, f)
        self._jobs_finished([i for i, s in statuses.items() if s == "failed"])
        self._settle([i for i, s in statuses.items()
                      if s == "failed" and self.rows[i].flow_id is not None])
        return statuses

    async def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool:
        row = self._held(job_id, attempt)
        if row is None:
            return False
        self._record(row, Outcome.SNOOZED, None)
        self._back_to_pending(row, self.clock() + max(delay.total_seconds(), 0.0), give_back=True)
        return True

    async def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> set[UUID]:
        kept = set()
        for job_id, attempt in running:
            row = self._held(job_id, attempt)
            if row is not None and row.lease_expires_at is not None:
                row.lease_expires_at = max(row.lease_expires_at, self.clock() + by.total_seconds())
                kept.add(job_id)
        return kept

    async def release(self, running: Sequence[tuple[UUID, int]]) -> set[UUID]:
        released = set()
        for job_id, attempt in running:
            row = self._held(job_id, attempt)
            if row is not None:
                self._record(row, Outcome.RELEASED, "released by a stopping worker")
                self._back_to_pending(row, self.clock(), give_back=True)
                released.add(job_id)
        return released

    async def running_check(self, running: Sequence[tuple[UUID, int]]) -> dict[UUID, str]:
        lost = {}
        for job_id, attempt in running:
            row = self.rows.get(job_id)
            if row is None or row.status != "processing" or row.attempts != attempt:
                lost[job_id] = "gone" if row is None else row.status
        return lost

    async def get(self, job_id: UUID) -> Job | None:
        row = self.rows.get(job_id)
        return None if row is None else _job(row)

    async def state(self, job_id: UUID) -> JobResult | None:
        row = self.rows.get(job_id)
        if row is None:
            return None
        return JobResult.from_row({
            "id": row.id, "status": row.status, "last_error": row.last_error, "attempts": row.attempts,
            "result": None if row.result is None else json.loads(row.result), "progress": row.progress,
            "completed_at": _dt(row.completed_at)})

    async def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        kept = set()
        for job_id, attempt, value in reports:
            row = self._held(job_id, attempt)
            if row is not None:
                row.progress = json.loads(json.dumps(value))  # stored as JSON, like jsonb
                kept.add(job_id)
        return kept

    async def load_steps(self, job_ids: Sequence[UUID]) -> dict[tuple[UUID, str, int], Any]:
        wanted = set(job_ids)
        return {key: None if r.result is None else json.loads(r.result)
                for key, r in self.steps.items() if key[0] in wanted and r.error is None}

    async def save_steps(self, steps: Sequence[StepRecord], hold: bool = False) -> set[tuple[UUID, int]]:
        for step in steps:  # refused as a whole, like one statement
            if not 1 <= len(step.name) <= 200 or step.occurrence < 1:
                raise DatabaseError("jobkit.save_steps: a step needs a name of 1 to 200 characters and an "
                                    "occurrence >= 1",
                                    hint='call ctx.step("name", fn) with a short, non-empty name')
            _stored_json(step.result)
            if step.error is not None:
                _stored_text(step.error)
        held = set()
        for step in steps:
            if self._held(step.job_id, step.attempt) is None:
                continue
            held.add((step.job_id, step.attempt))
            key = (step.job_id, step.name, step.occurrence)
            kept = self.steps.get(key)
            if kept is None or kept.error is not None:  # a completed step is never overwritten
                result = None if step.error is not None or step.result == "null" else step.result
                self.steps[key] = step._replace(result=result, tries=max(step.tries, 1))
        return held

    async def create_flow(self, graph: Any, trace_context: TraceContext | None = None) -> FlowRun:
        return self.flow(graph)

    async def parents(self, job_id: UUID) -> list[Parent]:
        found = [(r, policy) for p, policy in self.parent_edges.get(job_id, [])
                 if (r := self.rows.get(p)) is not None]
        found.sort(key=lambda x: x[0].created_at)  # stable: the flow's order
        return [Parent(r.id, r.type, r.status, None if r.result is None else json.loads(r.result),
                       r.last_error, policy) for r, policy in found]

    async def flow_state(self, flow_id: UUID) -> list[JobResult]:
        rows = sorted((r for r in self.rows.values() if r.flow_id == flow_id),
                      key=lambda r: r.created_at)  # stable: the flow's order
        ended = all(r.status in ("completed", "failed", "dead", "cancelled") for r in rows)
        return [JobResult.from_row({
            "id": r.id, "status": r.status, "attempts": r.attempts, "completed_at": _dt(r.completed_at),
            **({"last_error": r.last_error, "progress": r.progress,
                "result": None if r.result is None else json.loads(r.result)} if ended else {})})
            for r in rows]

    async def take_tokens(self, key: str, want: int) -> int:
        return self._take(key, max(want, 0), self.clock())

    async def token_wait(self, key: str) -> float:
        bucket = self._buckets.get(key)
        if bucket is None:
            return 0.0
        tokens = self._refill(bucket, self.clock())
        return max(0.0, (1 - tokens) / bucket.rate)

    async def due_count(self, job_type: str) -> int:
        return min(len(self._due(job_type, self.clock())), 1000)

    async def due_types(self) -> list[str]:
        return sorted({r.type for r in self.rows.values() if r.status == "pending"}
                      | {w.type for w in self._due_waits()})

    async def next_due(self, job_type: str) -> float | None:
        times = [r.scheduled_for for r in self.rows.values() if r.type == job_type and r.status == "pending"]
        if (wait := self._next_wait(job_type)) is not None:
            times.append(wait)
        return min(times) - self.clock() if times else None

    async def worker_keys(self) -> list[str]:
        return [self.secret] if self.secret else []

    async def ping(self) -> None:
        return None

    async def record_types(self, types: Sequence[str]) -> None:
        self.known_types.update(types)

    async def worker_beat(self, worker: WorkerInfo, running: int) -> None:
        self.workers[worker.id] = (worker, max(running, 0), self.clock(), None)

    async def worker_gone(self, worker_id: str) -> None:
        row = self.workers.get(worker_id)
        if row is not None and row[3] is None:
            self.workers[worker_id] = (row[0], 0, row[2], "stopped")
    async def consume_wake(self, nonce: str, expires_at: datetime) -> bool:
        """Once per backend (a fleet sharing this memory): the nonce store of the database's
        consume_wake, expired entries forgotten."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        self.wake_nonces = {n: e for n, e in self.wake_nonces.items() if e >= now}
        if nonce in self.wake_nonces:
            return False
        self.wake_nonces[nonce] = expires_at
        return True

    async def wake_draining(self, job_type: str, until: timedelta) -> None:
        return None  # nothing enqueued here sends a wake-up

    async def wake_idle(self, job_type: str, handoff: bool = False) -> bool:
        return True

    # ---- what the built-in schedules and operators do ------------------------------------------------

    def sweep_stuck(self) -> dict[UUID, str]:
        """Expired leases: pending with backoff while the round has attempts left, else failed."""
        self.sweep_waits()
        now, swept = self.clock(), {}
        for row in self.rows.values():
            if row.status == "processing" and row.lease_expires_at is not None and row.lease_expires_at < now:
                error = f"lease expired (worker {row.worker_id})"
                swept[row.id] = self._fail_one(
                    row, Failure(row.id, row.attempts, error), outcome="lease_expired"
                )
        self._settle([i for i, s in swept.items() if s == "failed" and self.rows[i].flow_id is not None])
        return swept

    def flow(self, graph: Any) -> FlowRun:
        """Insert a graph (jobkit.Flow), as create_flow does: children blocked until their parents end."""
        flow_params(graph)  # the same checks
        flow_id = uuid.uuid4()
        self.flows[flow_id] = False
        ids = [self._enqueue(job) for job in graph.jobs]
        for edge in graph.edges:
            parent, child = ids[edge.parent], ids[edge.child]
            self.children.setdefault(parent, []).append((child, edge.policy))
            self.parent_edges.setdefault(child, []).append((parent, edge.policy))
        for job_id in ids:
            row = self.rows[job_id]
            row.flow_id = flow_id
            if job_id in self.parent_edges:
                row.status, row.blocked_by = "blocked", len(self.parent_edges[job_id])
        return FlowRun(flow_id, ids)

    def cancel(self, job_id: UUID) -> bool:
        """cancel_job: a pending, blocked or processing job is cancelled; its graph's children told."""
        row = self.rows.get(job_id)
        if row is None or row.status not in ("pending", "processing", "blocked"):
            return False
        if row.status == "processing":
            self._record(row, "cancelled", None)
        row.status, row.completed_at, row.lease_expires_at, row.updated_at = (
            "cancelled", self.clock(), None, self.clock())
        self._jobs_finished([job_id])
        self._settle([job_id] if row.flow_id is not None else [])
        return True

    def cancel_flow(self, flow_id: UUID) -> int:
        n = 0
        for row in self.rows.values():
            if row.flow_id == flow_id and row.status in ("pending", "blocked", "waiting", "processing"):
                row.status, row.completed_at, row.lease_expires_at, row.settled = (
                    "cancelled", self.clock(), None, True)
                n += 1
        return n

    def pause_flow(self, flow_id: UUID) -> int | None:
        if flow_id not in self.flows:
            return None
        self.flows[flow_id] = True
        held = [r for r in self.rows.values() if r.flow_id == flow_id and r.status == "pending"]
        for row in held:
            row.status, row.blocked_by = "blocked", 0
        return len(held)

    def resume_flow(self, flow_id: UUID) -> int | None:
        if flow_id not in self.flows:
            return None
        self.flows[flow_id] = False
        ready = [r for r in self.rows.values()
                 if r.flow_id == flow_id and r.status == "blocked" and not r.blocked_by]
        for row in ready:
            row.status, row.scheduled_for = "pending", max(row.scheduled_for, self.clock())
        return len(ready)

    def retry(self, job_id: UUID) -> bool:
        row = self.rows.get(job_id)
        if row is None or row.status not in ("failed", "dead", "cancelled"):
            return False
        row.round_start, row.completed_at = row.attempts, None
        self._back_to_pending(row, self.clock())
        return True

    def history(self, job_id: UUID) -> list[Attempt]:
        row = self.rows[job_id]
        done = (
            [
                Attempt(
                    row.attempts,
                    row.worker_id,
                    _dt(row.started_at),
                    _dt(row.completed_at),
                    Outcome.COMPLETED.value,
                    None,
                    None,
                )
            ]
            if row.status == "completed"
            else []
        )
        return [*row.history, *done]

    # ---- the rules -------------------------------------------------------------------------------------

    def _settle(self, ended: list[UUID]) -> None:
        """_settle_children (48_flows.sql): tell each ended parent's blocked children, once."""
        while ended:
            told: dict[UUID, list[tuple[str, str]]] = {}
            for parent in ended:
                row = self.rows[parent]
                if row.settled or row.status not in ("completed", "failed", "dead", "cancelled"):
                    continue
                row.settled = True
                for child, policy in self.children.get(parent, []):
                    told.setdefault(child, []).append((row.status, policy))
            ended = [c for c, news in told.items() if self._tell(self.rows[c], news)]

    def _tell(self, row: _Row, news: list[tuple[str, str]]) -> bool:
        """Apply its parents' ends to a blocked child; True when the child ended too."""
        if row.status != "blocked":
            return False
        fails = any(s in ("failed", "dead") and p == "fail" for s, p in news)
        cancels = any(s != "completed" and p != "run" for s, p in news)
        row.blocked_by = max((row.blocked_by or 0) - sum(s == "completed" or p == "run" for s, p in news), 0)
        row.updated_at = self.clock()
        if fails or cancels:
            row.status, row.completed_at = ("failed" if fails else "cancelled"), self.clock()
            row.last_error = ("a parent of this job failed (on_parent_failure = fail)" if fails
                              else "a parent of this job failed or was cancelled")
            return True
        if row.blocked_by == 0 and not self.flows.get(row.flow_id or uuid.UUID(int=0), False):
            row.status, row.scheduled_for = "pending", max(row.scheduled_for, self.clock())
        return False

    def _config(self, job_type: str) -> TypeConfig:
        return self.types.get(job_type, self.defaults)

    def _enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> UUID:
        if not job.type:
            raise DatabaseError("jobkit.enqueue: p_type must be a non-empty job type")
        if job.idempotency_key is not None:
            held = next(
                (
                    r
                    for r in self.rows.values()
                    if r.type == job.type
                    and r.status in ("pending", "processing")
                    and r.idempotency_key == job.idempotency_key
                ),
                None,
            )
            if held is not None:
                return held.id
        now = self.clock()
        when = (
            job.run_at.timestamp() if job.run_at else now + (job.delay.total_seconds() if job.delay else 0.0)
        )
        cfg = self._config(job.type)
        template = cfg.concurrency_key
        row = _Row(
            uuid.uuid4(),
            job.type,
            _stored_json(json.dumps(job.payload)) or "null",
            job.priority or 0,
            when,
            now,
            job.max_attempts,
            job.idempotency_key,
            updated_at=now,
            trace_context=dict(trace_context) if trace_context else None,
            concurrency_key=job.concurrency_key if job.concurrency_key is not None else
            template.render(job.payload) if template is not None else "" if cfg.fair else None,
        )
        self.rows[row.id] = row
        return row.id

    def _due(self, job_type: str, now: float) -> list[_Row]:
        due = [
            r
            for r in self.rows.values()
            if r.type == job_type and r.status == "pending" and r.scheduled_for <= now
        ]
        return sorted(due, key=lambda r: (-r.priority, r.scheduled_for))

    def _fair(self, job_type: str, due: list[_Row], limit: int) -> list[_Row]:
        """A fair type's claim order and limits, as _claim_fair: keys round-robin from the one
        after the last served, at most max_running_per_key running per key and max_running in all."""
        cfg = self._config(job_type)
        running: dict[str, int] = {}
        for r in self.rows.values():
            if r.type == job_type and r.status == "processing" and r.concurrency_key is not None:
                running[r.concurrency_key] = running.get(r.concurrency_key, 0) + 1
        if cfg.max_running is not None:
            limit = min(limit, cfg.max_running - sum(running.values()))
        by_key: dict[str, list[_Row]] = {}
        for r in due:
            if r.concurrency_key is not None:
                by_key.setdefault(r.concurrency_key, []).append(r)
        cursor = self._cursors.get(job_type)
        after = [k for k in sorted(by_key) if cursor is None or k > cursor]
        keys = after + [k for k in sorted(by_key) if k not in after]
        room = {k: len(by_key[k]) if cfg.max_running_per_key is None
                else min(len(by_key[k]), cfg.max_running_per_key - running.get(k, 0)) for k in keys}
        picked: list[_Row] = []
        rank = 0
        while len(picked) < limit:
            served = [k for k in keys if rank < room[k]][:limit - len(picked)]
            if not served:
                break
            picked += [by_key[k][rank] for k in served]
            self._cursors[job_type] = served[-1]
            rank += 1
        return picked

    def _claim_one(
        self, row: _Row, worker: str, lease_until: float, handler_max: int | None, now: float
    ) -> Claimed:
        row.status, row.attempts, row.started_at = "processing", row.attempts + 1, now
        row.lease_expires_at, row.worker_id, row.handler_max_attempts, row.updated_at = (
            lease_until,
            worker,
            handler_max,
            now,
        )
        cap = row.round_start + self._limit(row)
        return Claimed(
            row.id, row.type, row.attempts, cap, row.priority, json.loads(row.payload), row.idempotency_key,
            row.trace_context,
        )

    def _limit(self, row: _Row) -> int:
        return row.max_attempts or row.handler_max_attempts or self._config(row.type).max_attempts

    def _held(self, job_id: UUID, attempt: int) -> _Row | None:
        """The row, when this attempt still holds it (the fence)."""
        row = self.rows.get(job_id)
        return row if row is not None and row.status == "processing" and row.attempts == attempt else None

    def _fail_one(self, row: _Row, failure: Failure, outcome: str | None = None) -> str:
        again = not failure.permanent and row.attempts - row.round_start < self._limit(row)
        row.last_error = failure.error
        self._record(row, outcome or (Outcome.RETRY if again else Outcome.FAILED), failure.error)
        if again:
            delay = failure.retry_in.total_seconds() if failure.retry_in else self._backoff(row)
            self._back_to_pending(row, self.clock() + max(delay, 1.0))
            return "pending"
        row.status, row.completed_at, row.lease_expires_at, row.updated_at = (
            "failed",
            self.clock(),
            None,
            self.clock(),
        )
        return "failed"

    def _backoff(self, row: _Row) -> float:
        b = self._config(row.type).backoff
        attempt = max(row.attempts - row.round_start, 1)
        seconds = min(b.cap.total_seconds(), b.base.total_seconds() * b.factor ** min(attempt - 1, 100))
        return max(1.0, seconds * (1 + b.jitter * (2 * self._random.random() - 1)))

    def _record(self, row: _Row, outcome: str, error: str | None) -> None:
        """``outcome``: an Outcome, or the sweep's lease_expired (job_history's words, as plain text)."""
        row.history.append(
            Attempt(
                row.attempts,
                row.worker_id,
                _dt(row.started_at),
                _dt(self.clock()),
                str(outcome),
                error,
                timedelta(seconds=self.clock() - (row.started_at or self.clock())),
            )
        )

    def _back_to_pending(self, row: _Row, when: float, give_back: bool = False) -> None:
        if give_back and row.status == "processing":
            row.attempts -= 1  # a snooze or a release does not use the attempt
        row.status, row.scheduled_for, row.lease_expires_at, row.updated_at = (
            "pending",
            when,
            None,
            self.clock(),
        )

    def _take(self, key: str, want: int, now: float) -> int:
        bucket = self._buckets.get(key)
        if bucket is None:
            return want
        tokens = self._refill(bucket, now)
        granted = min(want, int(tokens))
        bucket.tokens, bucket.at = tokens - granted, now
        return granted

    @staticmethod
    def _refill(bucket: _Bucket, now: float) -> float:
        return min(float(bucket.burst), bucket.tokens + bucket.rate * max(now - bucket.at, 0.0))


def _stored_json(text: str | None) -> str | None:
    """``text`` as jsonb would store it, or DatabaseError for what jsonb refuses (as PostgreSQL does)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DatabaseError(f"invalid input syntax for type json: {exc}") from None
    _stored_text(json.dumps(value, ensure_ascii=False))
    if "\\u0000" in text:
        raise DatabaseError("unsupported Unicode escape sequence (\\u0000 cannot be converted to text)")
    return text


def _stored_text(text: str) -> None:
    """What a text column refuses: NUL, and strings that are not valid UTF-8 (lone surrogates)."""
    if "\x00" in text:
        raise DatabaseError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise DatabaseError(f"a value cannot be sent as UTF-8: {exc}") from None


def _dt(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _job(row: _Row) -> Job:
    return Job(
        row.id,
        row.type,
        json.loads(row.payload),
        Status(row.status),
        row.priority,
        row.attempts,
        row.max_attempts,
        row.last_error,
        None if row.result is None else json.loads(row.result),
        _dt(row.scheduled_for) or datetime.now(UTC),
        _dt(row.started_at),
        _dt(row.completed_at),
        _dt(row.created_at) or datetime.now(UTC),
        _dt(row.lease_expires_at),
        row.worker_id,
        row.idempotency_key,
        _dt(row.updated_at) or datetime.now(UTC),
        row.handler_max_attempts,
        row.round_start,
        row.trace_context,
        row.concurrency_key,
        row.progress,
    )
