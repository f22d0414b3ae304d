"""Enqueue from Python: ``jobkit.enqueue(target, "send_email", {...})``.

``target`` is a database URL, a :class:`jobkit.connector.Database`, a jobkit Session, your own
psycopg connection (the job is then part of *your* transaction: it exists only if you commit), or
a supabase-py client (the job goes through the Data API schema, see ``[api] schema``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from .connector import Database, Session
from .exceptions import ConfigError
from .jobs import NewJob
from .lifecycle import Lifecycle


def enqueue(target: Any, job_type: str, payload: Any, *, priority: int = 0,
            run_at: datetime | None = None, delay: timedelta | float | None = None,
            max_attempts: int | None = None, idempotency_key: str | None = None,
            schema: str = "jobkit", api_schema: str = "jobkit_api") -> UUID:
    """Enqueue one job; returns its id (an existing unfinished job's id for a repeated key)."""
    job = NewJob(job_type, payload, priority=priority, run_at=run_at, max_attempts=max_attempts,
                 idempotency_key=idempotency_key, delay=_delta(delay))
    return enqueue_many(target, [job], schema=schema, api_schema=api_schema)[0] if _is_supabase(
        target) else _one(target, job, schema)


def enqueue_many(target: Any, jobs: Sequence[NewJob], *, schema: str = "jobkit",
                 api_schema: str = "jobkit_api") -> list[UUID]:
    """Enqueue many jobs in one statement; ids in input order."""
    if not jobs:
        return []
    if _is_supabase(target):
        return _supabase_many(target, jobs, api_schema)
    with _session(target) as session:
        return Lifecycle(session, schema).enqueue_many(jobs)


def _one(target: Any, job: NewJob, schema: str) -> UUID:
    with _session(target) as session:
        return Lifecycle(session, schema).enqueue(job)


@contextmanager
def _session(target: Any) -> Iterator[Session]:
    if isinstance(target, Session):
        yield target
        return
    wrapped = Session.wrap(target)
    if wrapped is not None:
        yield wrapped
        return
    if isinstance(target, str):
        target = Database(target)
    if not isinstance(target, Database):
        raise ConfigError(f"cannot enqueue into a {type(target).__name__}",
                          hint="pass a database URL, a psycopg connection or a supabase-py client")
    with target.session() as session:
        yield session


def _is_supabase(target: Any) -> bool:
    return hasattr(target, "rpc") and hasattr(target, "schema") and not isinstance(target, (str, Session))


def _supabase_many(client: Any, jobs: Sequence[NewJob], api_schema: str) -> list[UUID]:
    from .worker.backends.supabase import enqueue_many_body  # supabase-py only when it is used

    rows = client.schema(api_schema).rpc("enqueue_many", enqueue_many_body(jobs)).execute().data
    return [UUID(r["id"]) for r in sorted(rows, key=lambda r: r["ord"])]


def _delta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=float(value))
