"""JobManager: one method per lifecycle query; the only Python code that names those queries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from .connector import Session, json_param
from .jobs import Job
from .queries import queries


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


@dataclass(frozen=True)
class Failure:
    """A failed attempt to record."""

    id: UUID
    attempt: int
    error: str
    retry_in: timedelta | None = None
    permanent: bool = False


Done = tuple[UUID, int, str | None]  # (job id, attempt, the result as JSON text; None = null)


def enqueue_params(job: NewJob) -> dict[str, Any]:
    return {
        "type": job.type, "payload": json_param(job.payload), "priority": job.priority or 0,
        "run_at": job.run_at, "delay": job.delay, "max_attempts": job.max_attempts,
        "idempotency_key": job.idempotency_key,
    }


def enqueue_many_params(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """Payloads and types travel as JSON (one encode, no per-element array quoting; one type
    for all travels as one string); a column that is all defaults travels as a single NULL."""
    types = [j.type for j in jobs]
    return {
        "types": json_param(types[0] if types and types.count(types[0]) == len(types) else types),
        "payloads": json_param([j.payload for j in jobs]),
        "priorities": _column([j.priority for j in jobs]), "run_ats": _column([j.run_at for j in jobs]),
        "delays": _column([j.delay for j in jobs]),
        "max_attempts": _column([j.max_attempts for j in jobs]),
        "idempotency_keys": _column([j.idempotency_key for j in jobs]),
    }


def _column(values: list[Any]) -> list[Any] | None:
    return None if all(v is None for v in values) else values


def complete_params(done: Sequence[Done]) -> dict[str, Any]:
    """The hot path's parameters in their cheapest form: ids and attempts as one array literal
    each, the results (JSON text, encoded once by the worker) joined into one JSON array
    (psycopg's per-element array dumping costs about 3 us an element). All-null results travel
    as one NULL."""
    results = [d[2] for d in done]
    joined = None if all(r is None for r in results) else (
        "[" + ",".join("null" if r is None else r for r in results) + "]")
    return {**running_params([(d[0], d[1]) for d in done]), "results": joined}


def running_params(running: Sequence[tuple[UUID, int]]) -> dict[str, str]:
    """(id, attempt) pairs as two array literals; uuids and ints need no quoting."""
    return {"ids": "{" + ",".join(str(r[0]) for r in running) + "}",
            "attempts": "{" + ",".join(str(int(r[1])) for r in running) + "}"}


def fail_params(failures: Sequence[Failure]) -> dict[str, Any]:
    return {
        "ids": [f.id for f in failures], "attempts": [f.attempt for f in failures],
        "errors": [f.error for f in failures], "retry_in": [f.retry_in for f in failures],
        "permanent": [f.permanent for f in failures],
    }


class JobManager:
    """The job lifecycle over one session."""

    def __init__(self, session: Session, schema: str) -> None:
        self.session = session
        self.q = queries(schema)

    def enqueue(self, job: NewJob) -> UUID:
        return UUID(str(self.session.scalar(self.q["enqueue"], enqueue_params(job))))

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[UUID]:
        rows = self.session.tuples(self.q["enqueue_many"], enqueue_many_params(jobs), binary=True)
        return [r[0] for r in rows]

    def pick(self, job_type: str, limit: int, worker: str, lease: timedelta) -> list[Job]:
        rows = self.session.all(
            self.q["pick_jobs"], {"type": job_type, "limit": limit, "worker": worker, "lease": lease}
        )
        return [Job.from_row(r) for r in rows]

    def complete(self, done: Sequence[tuple[UUID, int, Any]]) -> set[UUID]:
        """Complete (id, attempt, result) triples; returns the ids that were accepted."""
        encoded = [(i, a, None if r is None else json.dumps(r)) for i, a, r in done]
        return {r["id"] for r in self.session.all(self.q["complete_jobs"], complete_params(encoded))}

    def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]:
        """Record failures; returns id -> new status for the accepted ones."""
        rows = self.session.all(self.q["fail_jobs"], fail_params(failures))
        return {r["id"]: r["status"] for r in rows}

    def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool:
        return bool(self.session.scalar(
            self.q["snooze_job"], {"id": job_id, "attempt": attempt, "delay": delay}))

    def extend_lease(self, job_id: UUID, attempt: int, by: timedelta) -> datetime | None:
        value = self.session.scalar(self.q["extend_lease"], {"id": job_id, "attempt": attempt, "by": by})
        return value if isinstance(value, datetime) else None

    def sweep_stuck(self) -> dict[UUID, str]:
        return {r["id"]: r["status"] for r in self.session.all(self.q["sweep_stuck"])}

    def sweep_dead(self) -> int:
        return int(self.session.scalar(self.q["sweep_dead"]) or 0)

    def retry(self, job_id: UUID) -> bool:
        return bool(self.session.scalar(self.q["retry_job"], {"id": job_id}))

    def cancel(self, job_id: UUID) -> bool:
        return bool(self.session.scalar(self.q["cancel_job"], {"id": job_id}))

    def prune(self, older_than: timedelta, batch_size: int = 5000) -> int:
        return int(self.session.scalar(
            self.q["prune"], {"older_than": older_than, "batch_size": batch_size}) or 0)

    def get(self, job_id: UUID) -> Job | None:
        row = self.session.one(self.q["get_job"], {"id": job_id})
        return Job.from_row(row) if row else None

    def attempts(self, job_id: UUID) -> list[dict[str, Any]]:
        return self.session.all(self.q["job_attempts"], {"id": job_id})

    def counts(self) -> list[dict[str, Any]]:
        return self.session.all(self.q["count_by_status"])
