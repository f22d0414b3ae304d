"""Enqueue from Python: ``jobkit.enqueue(target, "send_email", {...})``, and from asyncio code
``await jobkit.enqueue_async(target, ...)``.

``target`` is a database URL, a :class:`jobkit.connector.Database`, a jobkit Session, your own
psycopg connection (the job is then part of *your* transaction: it exists only if you commit), or
a supabase-py client (the job goes through the Data API schema, see ``[api] schema``). The async
forms take a URL or your own psycopg ``AsyncConnection`` (again inside your transaction).

With OpenTelemetry configured, each call is a ``jobkit.enqueue <type>`` span whose context is stored
with the jobs, so the worker's spans continue the caller's trace (tracing.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, Literal, overload
from uuid import UUID

import psycopg

from . import tracing
from .connector import Database, Session, sqlstate
from .connector.aio import AsyncSession
from .durations import parse_duration
from .exceptions import ConfigError, DatabaseError, NotDeployed
from .jobs import JobResult, NewJob, TraceContext
from .lifecycle import PLAIN_TAIL, Lifecycle, Statements, plain_types
from .validate import integer, stored_time, type_name

MAX_KEY = 1000  # characters: a btree entry must stay well under its ~2.7 kB limit


@overload
def enqueue(target: Any, job_type: str, payload: Any, *, priority: int = 0, run_at: datetime | None = None,
            delay: timedelta | float | None = None, max_attempts: int | None = None,
            idempotency_key: str | None = None, concurrency_key: str | None = None,
            debounce: timedelta | str | float | None = None, throttle: timedelta | str | float | None = None,
            schema: str = "jobkit", api_schema: str = "jobkit_api",
            wait: Literal[False] = False, timeout: float = 30.0) -> UUID: ...


@overload
def enqueue(target: Any, job_type: str, payload: Any, *, priority: int = 0, run_at: datetime | None = None,
            delay: timedelta | float | None = None, max_attempts: int | None = None,
            idempotency_key: str | None = None, concurrency_key: str | None = None,
            debounce: timedelta | str | float | None = None, throttle: timedelta | str | float | None = None,
            schema: str = "jobkit", api_schema: str = "jobkit_api",
            wait: Literal[True], timeout: float = 30.0) -> JobResult: ...


def enqueue(target: Any, job_type: str, payload: Any, *, priority: int = 0,
            run_at: datetime | None = None, delay: timedelta | float | None = None,
            max_attempts: int | None = None, idempotency_key: str | None = None,
            concurrency_key: str | None = None, debounce: timedelta | str | float | None = None,
            throttle: timedelta | str | float | None = None,
            schema: str = "jobkit", api_schema: str = "jobkit_api", wait: bool = False,
            timeout: float = 30.0) -> UUID | JobResult:
    """Enqueue one job; returns its id (an existing unfinished job's id for a repeated idempotency
    key). ``concurrency_key``: the job's key (default: the type's template). With ``debounce``
    ("30s") a pending job of the same type and key takes this payload and runs ``debounce`` after
    this call instead (its id comes back); with ``throttle`` ("1m") only the first job of a key
    per window is created, later calls in the window return its id. With ``wait=True``: waits up
    to ``timeout`` seconds for it to finish and returns its JobResult (see :func:`jobkit.wait`,
    which raises JobFailed or WaitTimeout)."""
    job = new_job(job_type, payload, priority=priority, run_at=run_at, delay=delay, max_attempts=max_attempts,
                  idempotency_key=idempotency_key, concurrency_key=concurrency_key, debounce=debounce,
                  throttle=throttle)
    if wait:
        _refuse_waiting_in_transaction(target)
    with tracing.enqueueing([job_type]) as traced:
        if _is_supabase(target):
            [job_id] = _supabase_many(target, [job], api_schema, traced.context)
        else:
            with _session(target) as session:
                job_id = Lifecycle(session, schema).enqueue(job, traced.context)
        traced.sent([job_id])
    if wait:
        from .results import wait as wait_for

        return wait_for(target, job_id, timeout=timeout, schema=schema, api_schema=api_schema)
    return job_id


def new_job(job_type: str, payload: Any, *, priority: int = 0, run_at: datetime | None = None,
            delay: timedelta | float | None = None, max_attempts: int | None = None,
            idempotency_key: str | None = None, concurrency_key: str | None = None,
            debounce: timedelta | str | float | None = None,
            throttle: timedelta | str | float | None = None) -> NewJob:
    """The job :func:`enqueue` would send, checked (ConfigError naming the field otherwise)."""
    return check_job(NewJob(job_type, payload, priority=priority, run_at=run_at, max_attempts=max_attempts,
                            idempotency_key=idempotency_key, delay=_delta(delay),
                            concurrency_key=concurrency_key, debounce=_window(debounce, "debounce"),
                            throttle=_window(throttle, "throttle")))


def enqueue_many(target: Any, jobs: Sequence[NewJob], *, schema: str = "jobkit",
                 api_schema: str = "jobkit_api") -> list[UUID]:
    """Enqueue many jobs in one statement; ids in input order."""
    if not jobs:
        return []
    jobs = check_jobs(jobs)
    with tracing.enqueueing(_types(jobs)) as traced:
        if _is_supabase(target):
            ids = _supabase_many(target, jobs, api_schema, traced.context)
        else:
            with _session(target) as session, _functions_current():
                ids = Lifecycle(session, schema).enqueue_many(jobs, traced.context)
        traced.sent(ids)
        return ids


@overload
async def enqueue_async(target: str | psycopg.AsyncConnection[Any], job_type: str, payload: Any, *,
                        priority: int = 0, run_at: datetime | None = None,
                        delay: timedelta | float | None = None, max_attempts: int | None = None,
                        idempotency_key: str | None = None, concurrency_key: str | None = None,
                        debounce: timedelta | str | float | None = None,
                        throttle: timedelta | str | float | None = None, schema: str = "jobkit",
                        wait: Literal[False] = False, timeout: float = 30.0) -> UUID: ...


@overload
async def enqueue_async(target: str | psycopg.AsyncConnection[Any], job_type: str, payload: Any, *,
                        priority: int = 0, run_at: datetime | None = None,
                        delay: timedelta | float | None = None, max_attempts: int | None = None,
                        idempotency_key: str | None = None, concurrency_key: str | None = None,
                        debounce: timedelta | str | float | None = None,
                        throttle: timedelta | str | float | None = None, schema: str = "jobkit",
                        wait: Literal[True], timeout: float = 30.0) -> JobResult: ...


async def enqueue_async(target: str | psycopg.AsyncConnection[Any], job_type: str, payload: Any, *,
                        priority: int = 0, run_at: datetime | None = None,
                        delay: timedelta | float | None = None, max_attempts: int | None = None,
                        idempotency_key: str | None = None, concurrency_key: str | None = None,
                        debounce: timedelta | str | float | None = None,
                        throttle: timedelta | str | float | None = None, schema: str = "jobkit",
                        wait: bool = False, timeout: float = 30.0) -> UUID | JobResult:
    """:func:`enqueue` for asyncio: on a URL, or on your AsyncConnection inside your transaction
    (``wait=True`` only outside one: see :func:`jobkit.wait_async`)."""
    job = check_job(NewJob(job_type, payload, priority=priority, run_at=run_at, max_attempts=max_attempts,
                           idempotency_key=idempotency_key, delay=_delta(delay),
                           concurrency_key=concurrency_key, debounce=_window(debounce, "debounce"),
                           throttle=_window(throttle, "throttle")))
    if wait:
        _refuse_waiting_in_transaction(target)
    with tracing.enqueueing([job_type]) as traced:
        async with _async_session(target) as session:
            job_id = await session.run(Statements(schema).enqueue(job, traced.context))
        traced.sent([job_id])
    if wait:
        from .results import wait_async

        return await wait_async(target, job_id, timeout=timeout, schema=schema)
    return job_id


def _refuse_waiting_in_transaction(target: Any) -> None:
    """A job enqueued inside the caller's open transaction cannot run before they commit."""
    if isinstance(target, (psycopg.Connection, psycopg.AsyncConnection)) and (
            not target.autocommit or target.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
        raise ConfigError("enqueue(..., wait=True) inside an open transaction would wait forever: "
                          "the job exists only once you commit",
                          hint="pass the URL or an autocommit connection, or commit and call jobkit.wait()")


async def enqueue_many_async(target: str | psycopg.AsyncConnection[Any], jobs: Sequence[NewJob], *,
                             schema: str = "jobkit") -> list[UUID]:
    """:func:`enqueue_many` for asyncio: one statement; ids in input order."""
    if not jobs:
        return []
    jobs = check_jobs(jobs)
    with tracing.enqueueing(_types(jobs)) as traced:
        async with _async_session(target) as session:
            session.adapt()  # the ids travel as a connector.UuidArray
            with _functions_current():
                ids = await session.run(Statements(schema).enqueue_many(jobs, traced.context))
        traced.sent(ids)
        return ids


@contextmanager
def _functions_current() -> Iterator[None]:
    """A bulk enqueue against a database whose jobkit functions predate this client (enqueue_json
    took its ``p_ids`` at stop 34: deploy first): NotDeployed naming the fix, not a bare "function
    does not exist"."""
    try:
        yield
    except DatabaseError as exc:
        if sqlstate(exc) != "42883":  # undefined_function
            raise
        raise NotDeployed(f"{exc.message}: this database's jobkit functions are older than this jobkit",
                          hint="run `jobkit deploy` with this version before its producers start") from exc


@asynccontextmanager
async def _async_session(target: Any) -> AsyncIterator[AsyncSession]:
    if isinstance(target, psycopg.AsyncConnection):
        yield AsyncSession(target)
        return
    if not isinstance(target, str):
        raise ConfigError(f"cannot enqueue_async into a {type(target).__name__}",
                          hint="pass a database URL or a psycopg AsyncConnection")
    async with AsyncSession.connect(target) as session:
        yield session


JSON_TYPES = (dict, list, str, int, float, bool, type(None))  # what a payload may be at its top


def check_job(job: NewJob) -> NewJob:
    """Refuse, with the field named, what the database would refuse with a misleading message (a
    long type read as "payload too long", a huge priority as "function does not exist"). A pydantic
    model payload becomes its JSON form (``model_dump(mode="json")``)."""
    if not isinstance(job, NewJob):
        raise ConfigError(f"each job to enqueue must be a jobkit.NewJob, got {job!r}",
                          hint="build each one with jobkit.NewJob(type, payload)")
    type_name(job.type)
    dump = getattr(job.payload, "model_dump", None)
    if callable(dump) and not isinstance(job.payload, type):
        job = job._replace(payload=dump(mode="json"))
    if not isinstance(job.payload, JSON_TYPES):
        raise ConfigError(f"the payload of a {job.type} job must be JSON, got a {type(job.payload).__name__}",
                          hint="pass a dict, list, string, number, bool, None or a pydantic model")
    if job.priority is not None:
        integer(job.priority, "priority", -(2**31), 2**31 - 1)
    if job.run_at is not None:
        stored_time(job.run_at, "run_at")
    if job.max_attempts is not None:
        integer(job.max_attempts, "max_attempts", 1, 1_000_000)
    if job.idempotency_key is not None:
        _key(job.idempotency_key, "idempotency_key", "hash a long key (e.g. sha256 hex) before enqueueing")
    if job.delay is not None:
        _span(job.delay, "delay")
    if job.concurrency_key is not None:
        _key(job.concurrency_key, "concurrency_key", "give a shorter key")
    for name in ("debounce", "throttle"):
        if getattr(job, name) is not None:
            _span(getattr(job, name), name)
    if job.debounce is not None and job.throttle is not None:
        raise ConfigError("give debounce or throttle, not both",
                          hint="debounce runs the last payload once; throttle keeps the first job")
    if (job.debounce or job.throttle) is not None and job.idempotency_key is not None:
        raise ConfigError("an idempotency key cannot be combined with debounce or throttle",
                          hint="debounce and throttle already make one job per concurrency key")
    return job


def _key(value: Any, what: str, hint: str) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY:
        got = f"{len(value)} characters" if isinstance(value, str) else f"a {type(value).__name__}"
        raise ConfigError(f"{what} must be a string of 1 to {MAX_KEY} characters, got {got}", hint=hint)


def _span(value: Any, what: str) -> None:
    if not isinstance(value, timedelta) or not timedelta(0) <= value <= timedelta(days=36500):
        raise ConfigError(f"{what} must be a timedelta between 0 and 100 years, got {value!r}",
                          hint=f"e.g. {what}=timedelta(seconds=30)")


def check_jobs(jobs: Sequence[NewJob]) -> list[NewJob]:
    """:func:`check_job` for a batch, and no debounce or throttle (they work one job at a time).
    The commonest batch, every job a NewJob with a dict or list payload and no other field set, is
    recognised in a few C-level passes (lifecycle.plain_types); in any other batch such a job passes
    with one comparison and the rest go through check_job, in order. Each distinct type name is
    checked once (issue 23: check_job per job was most of what enqueue_many's client side spent
    more than ede9fd6's); an unhashable one (a list) is refused by name like any other."""
    names: Collection[str] | None
    try:
        names = plain_types(jobs)
    except TypeError:  # an unhashable type name: the per-job path below
        names = None
    if names is not None:
        checked = list(jobs)
    else:
        checked = [job if (job.__class__ is NewJob and job[2:] == PLAIN_TAIL
                           and job.payload.__class__ in (dict, list))
                   else _one_at_a_time(check_job(job)) for job in jobs]
        try:
            names = {job.type for job in checked}
        except TypeError:
            names = [job.type for job in checked]
    for name in names:
        type_name(name)
    return checked


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


def _supabase_many(client: Any, jobs: Sequence[NewJob], api_schema: str,
                   trace_context: TraceContext | None) -> list[UUID]:
    from .worker.backends.supabase import enqueue_many_body  # supabase-py only when it is used

    body = enqueue_many_body(jobs, trace_context)
    rows = client.schema(api_schema).rpc("enqueue_many", body).execute().data
    return [UUID(r["id"]) for r in sorted(rows, key=lambda r: r["ord"])]


def _types(jobs: Sequence[NewJob]) -> list[str]:
    return [*map(_TYPE, jobs)]  # a C-level pass (tracing reads it only when a tracer is set)


_TYPE = itemgetter(0)  # NewJob.type


def _one_at_a_time(job: NewJob) -> NewJob:
    if job.debounce is not None or job.throttle is not None:
        raise ConfigError("debounce and throttle work one job at a time",
                          hint="call jobkit.enqueue for each such job")
    return job


def _window(value: timedelta | str | float | None, what: str) -> timedelta | None:
    if isinstance(value, str):
        value = parse_duration(value, what=what)
    delta = _delta(value)
    if delta is not None and not timedelta(0) <= delta <= timedelta(days=36500):
        raise ConfigError(f"{what} must be between 0 and 100 years, got {delta}")
    return delta


def _delta(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=float(value))
    except (TypeError, ValueError, OverflowError):  # nan, 1e300, an object
        raise ConfigError(f"a duration must be a timedelta, seconds or a string like '30s', got {value!r}",
                          hint="e.g. timedelta(seconds=30), 30 or '30s'") from None
