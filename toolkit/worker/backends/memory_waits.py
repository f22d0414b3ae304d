"""The memory backend's waits and events (issue 25), with the semantics of sql/functions/47_waits.sql:
a wait ends its attempt (not consumed) and the job waits; emit resolves the waits registered before
it and a wait registered after it still sees it (latch: the earliest event, emitted since the job
began, that the job has not consumed); due times are resolved by the claim of the type and by the
sweep; a job's finishing resolves the jobs waits on it. Resolving stores the outcome as a step and
makes the job pending."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ...config import EventConfig
from ...exceptions import DatabaseError
from ...jobs import NewJob, StepRecord, WaitSpec
from ..attempt import Outcome

FINISHED = ("completed", "failed", "dead", "cancelled")
RETENTION = 7 * 86400.0


@dataclass
class _Wait:
    job_id: UUID
    type: str
    spec: WaitSpec
    attempt: int
    due: float | None
    created: float


@dataclass
class _Event:
    id: int
    name: str
    key: str
    generation: int
    data: Any
    dedupe: str | None
    emitted_at: float
    expires_at: float

    def json(self) -> dict[str, Any]:
        return {"event": self.name, "key": self.key or None, "data": self.data, "id": self.id,
                "generation": self.generation,
                "emitted_at": datetime.fromtimestamp(self.emitted_at, UTC).isoformat()}


@dataclass
class Waits:
    """The job_waits, events and event_config tables."""

    open: dict[UUID, _Wait] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)
    config: dict[str, EventConfig] = field(default_factory=dict)
    consumed: set[tuple[UUID, int]] = field(default_factory=set)  # (job, event id) a wait returned
    last_id: int = 0


class WaitsInMemory:
    """Mixed into MemoryBackend (which provides rows, steps, clock and the helpers below)."""

    rows: dict[UUID, Any]
    steps: dict[tuple[UUID, str, int], StepRecord]
    clock: Callable[[], float]
    waits: Waits

    # MemoryBackend's own
    def _held(self, job_id: UUID, attempt: int) -> Any | None:
        raise NotImplementedError  # pragma: no cover

    def _record(self, row: Any, outcome: str, error: str | None) -> None:
        raise NotImplementedError  # pragma: no cover

    def _enqueue(self, job: NewJob, trace_context: Any = None) -> UUID:
        raise NotImplementedError  # pragma: no cover

    async def suspend(self, job_id: UUID, attempt: int, wait: WaitSpec) -> str | None:
        _check(wait)
        now = self.clock()
        due = _due(wait, now)
        result: Any = None
        resolved = False
        if wait.kind == "jobs":
            states = self._states(wait.job_ids)
            resolved = all(s in FINISHED or s == "gone" for s in states.values())
            result = {"jobs": states} if resolved else None
        row = self._held(job_id, attempt)
        if row is None:
            return None
        if wait.kind == "event":
            found = self._latch(job_id, row.created_at, wait)
            if found is not None:
                resolved, result = True, found.json()
        if not resolved and due is not None and due <= now:
            resolved = True
        self._record(row, Outcome.WAITED, None)
        row.attempts -= 1
        row.lease_expires_at, row.updated_at = None, now
        if resolved:
            self._store(job_id, wait.step, wait.occurrence, attempt, result)
            row.status, row.scheduled_for = "pending", now
            return "pending"
        row.status, row.scheduled_for = "waiting", due if due is not None else now
        self.waits.open[job_id] = _Wait(job_id, row.type, wait, attempt, due, now)
        return "waiting"

    async def emit(self, name: str, key: str | None = None, data: Any = None,
                   id: str | None = None) -> int:  # noqa: A002 - the emit's own id
        if not isinstance(name, str) or not 1 <= len(name) <= 200 or "\x1f" in name or len(key or "") > 1000:
            raise DatabaseError("jobkit.emit: an event needs a name of 1 to 200 characters (and a key of "
                                "at most 1000)")
        data = json.loads(json.dumps(data))  # stored as JSON, like jsonb
        k = key or ""
        same = [e for e in self.waits.events if e.name == name and e.key == k]
        if id is not None:
            for e in same:
                if e.dedupe == id:
                    return e.id
        now = self.clock()
        config = self.waits.config.get(name, EventConfig())
        retention = config.retention.total_seconds() if config.retention is not None else RETENTION
        self.waits.last_id += 1
        generation = max((e.generation for e in same), default=0) + 1
        event = _Event(self.waits.last_id, name, k, generation, data, id,
                       now, now + retention)
        self.waits.events.append(event)
        hit = [w for w in self.waits.open.values() if w.spec.kind == "event" and (name, k) in _pairs(w.spec)]
        for w in sorted(hit, key=lambda w: str(w.job_id)):
            self._resolve(w, event.json())
        for job_type in config.types:
            self._enqueue(NewJob(job_type, event.json(), idempotency_key=f"event:{event.id}"))
        return event.id

    # ---- what resolves waits besides emit ------------------------------------------------------------

    def _wake_due(self, job_type: str | None) -> int:
        now = self.clock()
        due = [w for w in self.waits.open.values()
               if w.due is not None and w.due <= now and (job_type is None or w.type == job_type)]
        for w in sorted(due, key=lambda w: w.due or 0.0):
            self._resolve(w, None)
        return len(due)

    def _jobs_finished(self, ids: Sequence[UUID]) -> None:
        done = set(ids)
        hit = [w for w in self.waits.open.values() if w.spec.kind == "jobs" and done & set(w.spec.job_ids)]
        for w in hit:
            states = self._states(w.spec.job_ids)
            if all(s in FINISHED or s == "gone" for s in states.values()):
                self._resolve(w, {"jobs": states})

    def sweep_waits(self) -> int:
        """The backstop of sweep_stuck: due waits, missed events, finished jobs, orphans."""
        count = self._wake_due(None)
        for w in list(self.waits.open.values()):
            row = self.rows.get(w.job_id)
            if row is None or row.status != "waiting":
                del self.waits.open[w.job_id]
            elif w.spec.kind == "event" and (found := self._latch(w.job_id, row.created_at, w.spec)):
                self._resolve(w, found.json())
                count += 1
            elif w.spec.kind == "jobs":
                states = self._states(w.spec.job_ids)
                if all(s in FINISHED or s == "gone" for s in states.values()):
                    self._resolve(w, {"jobs": states})
                    count += 1
        now = self.clock()
        self.waits.events = [e for e in self.waits.events if e.expires_at >= now]
        return count

    def _due_waits(self, job_type: str | None = None) -> list[_Wait]:
        now = self.clock()
        return [w for w in self.waits.open.values()
                if w.due is not None and w.due <= now and (job_type is None or w.type == job_type)]

    def _next_wait(self, job_type: str) -> float | None:
        dues = [w.due for w in self.waits.open.values() if w.type == job_type and w.due is not None]
        return min(dues) if dues else None

    # ---- the rules --------------------------------------------------------------------------------------

    def _latch(self, job_id: UUID, since: float, wait: WaitSpec) -> _Event | None:
        now = self.clock()
        wanted = set(_pairs(wait))
        found = [e for e in self.waits.events
                 if (e.name, e.key) in wanted and e.emitted_at >= since and e.expires_at > now
                 and (job_id, e.id) not in self.waits.consumed]
        return min(found, key=lambda e: (e.emitted_at, e.id)) if found else None

    def _states(self, ids: Sequence[UUID]) -> dict[str, str]:
        return {str(i): (self.rows[i].status if i in self.rows else "gone") for i in dict.fromkeys(ids)}

    def _resolve(self, wait: _Wait, result: Any) -> None:
        self.waits.open.pop(wait.job_id, None)
        self._store(wait.job_id, wait.spec.step, wait.spec.occurrence, wait.attempt, result)
        row = self.rows.get(wait.job_id)
        if row is not None and row.status == "waiting":
            row.status, row.scheduled_for, row.updated_at = "pending", self.clock(), self.clock()

    def _store(self, job_id: UUID, step: str, occurrence: int, attempt: int, result: Any) -> None:
        if isinstance(result, dict) and "id" in result and "event" in result:
            self.waits.consumed.add((job_id, int(result["id"])))
        key = (job_id, step, occurrence)
        kept = self.steps.get(key)
        if kept is None or kept.error is not None:
            self.steps[key] = StepRecord(job_id, attempt, step, occurrence,
                                         None if result is None else json.dumps(result), None, 1,
                                         datetime.fromtimestamp(self.clock(), UTC))


def _pairs(wait: WaitSpec) -> list[tuple[str, str]]:
    return [(n, k or "") for n, k in zip(wait.events, wait.keys or (None,) * len(wait.events), strict=False)]


def _due(wait: WaitSpec, now: float) -> float | None:
    at = wait.due.timestamp() if wait.due is not None else None
    later = now + wait.delay.total_seconds() if wait.delay is not None else None
    dues = [d for d in (at, later) if d is not None]
    return min(dues) if dues else None


def _check(wait: WaitSpec) -> None:
    """What suspend_job refuses."""
    bad = (wait.kind not in ("sleep", "event", "jobs") or not 1 <= len(wait.step) <= 200
           or wait.occurrence < 1
           or (wait.delay is not None and wait.delay < timedelta(0))
           or (wait.kind == "sleep" and wait.due is None and wait.delay is None)
           or (wait.kind == "event" and (not wait.events or any(not 1 <= len(n) <= 200 for n in wait.events)))
           or (wait.kind == "jobs" and not wait.job_ids))
    if bad:
        raise DatabaseError(f"jobkit.suspend_job: this wait cannot be recorded: {wait!r}",
                            hint="give the wait a short name and what it waits for")
