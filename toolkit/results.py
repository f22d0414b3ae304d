"""Await a job's result: ``jobkit.wait(target, job_id, timeout=30)`` and ``await jobkit.wait_async(...)``;
a flow's, given the FlowRun ``jobkit.flow`` returned (or ``jobkit.wait_flow(target, flow_id)``): a
FlowResult once every job of it ended (toolkit/flowwait.py keeps that wait's open jobs).

Both return the job's :class:`~jobkit.jobs.JobResult` once it completed, and raise
:class:`~jobkit.exceptions.JobFailed` (carrying the job's last error) when it failed, was
dead-lettered or cancelled, :class:`~jobkit.exceptions.WaitTimeout` when it did not finish in time,
and :class:`~jobkit.exceptions.NotFound` for an unknown id.

How they learn that a job finished: on a database URL the waiter LISTENs on the channel
``<schema>_done`` on its own connection, then registers the job (``wait_on``, migration 0014), and
the statement that finishes a registered job notifies the channel, so the result arrives at the
finishing commit (jobs nobody waits on are finished without a notification). It re-reads the job's state
as well, every ``poll`` seconds at most (starting at 50 ms, doubling), so a lost notification only
costs time. Where LISTEN is unavailable (PgBouncer or Supavisor in transaction mode: pass
``listen=False``), on your own connection, through supabase-py (the ``job_state`` RPC of the API
schema) and on a worker Backend, polling alone does the work. ``on_progress`` is called with each
new :class:`~jobkit.jobs.Progress` the handler reported (the state is then re-read at least twice
a second).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Any, overload
from uuid import UUID

import psycopg

from .connector import Database, Session
from .connector.aio import AsyncSession
from .exceptions import ConfigError, JobFailed, NotFound, WaitTimeout
from .flowwait import FlowWatch, flow_id
from .jobs import FlowResult, FlowRun, JobResult, Progress, Status
from .lifecycle import Statements
from .names import done_channel

FIRST_POLL = 0.05  # seconds before the first re-read; doubled after each one up to the cap
LISTENING_POLL = 5.0  # the re-read cap while a notification can arrive (lost ones only cost this)
PROGRESS_POLL = 0.5  # the cap while someone wants progress
REGISTRATION_MARGIN = 60.0  # seconds a waiter's row outlives its timeout (then prune deletes it)
ProgressCallback = Callable[[Progress], Any]


@overload
def wait(target: Any, job_id: UUID | str, *, timeout: float = 30.0, poll: float = 1.0,
         listen: bool | None = None, on_progress: ProgressCallback | None = None, schema: str = "jobkit",
         api_schema: str = "jobkit_api") -> JobResult: ...


@overload
def wait(target: Any, job_id: FlowRun, *, timeout: float = 30.0, poll: float = 1.0,
         listen: bool | None = None, on_progress: ProgressCallback | None = None, schema: str = "jobkit",
         api_schema: str = "jobkit_api") -> FlowResult: ...


def wait(target: Any, job_id: UUID | str | FlowRun, *, timeout: float = 30.0, poll: float = 1.0,
         listen: bool | None = None, on_progress: ProgressCallback | None = None, schema: str = "jobkit",
         api_schema: str = "jobkit_api") -> JobResult | FlowResult:
    """Block until the job finishes; its JobResult (completed) or JobFailed / WaitTimeout / NotFound.
    Given the FlowRun :func:`jobkit.flow` returned, :func:`wait_flow`: until every job of the flow
    ended, and its :class:`~jobkit.jobs.FlowResult`.

    ``target`` is what :func:`jobkit.enqueue` takes: a URL or Database (LISTEN on a connection of
    its own unless ``listen=False``), your psycopg connection or Session (polled, outside your
    transaction's snapshot only in autocommit or read committed), or a supabase-py client (polled
    over RPC). ``poll``: the most seconds between two reads of the job without LISTEN."""
    if isinstance(job_id, FlowRun):
        _no_progress(on_progress)
        return wait_flow(target, job_id, timeout=timeout, poll=poll, listen=listen, schema=schema,
                         api_schema=api_schema)
    job = _uuid(job_id)
    watch = _Watch(job, timeout, poll, on_progress)
    if _is_supabase(target):
        def read() -> JobResult | None:
            return _from_rpc(target.schema(api_schema).rpc("state", {"p_id": str(job)}).execute().data)
        return watch.sync(read, None)
    with ExitStack() as stack:
        session = _session(stack, target)
        statement = Statements(schema).state(job)
        notes: Callable[[float], list[tuple[str, str]]] | None = None
        if _owned(target) and listen is not False:
            session.listen(done_channel(schema))
            session.run(Statements(schema).wait_on([job], _registration(timeout)))
            notes = session.notifies
        elif listen:
            raise ConfigError("listen=True needs a database URL: wait LISTENs on a connection of its own",
                              hint="pass the URL, or leave listen unset to poll your connection")
        return watch.sync(lambda: session.run(statement), notes)


@overload
async def wait_async(target: Any, job_id: UUID | str, *, timeout: float = 30.0, poll: float = 1.0,
                     listen: bool | None = None, on_progress: ProgressCallback | None = None,
                     schema: str = "jobkit", api_schema: str = "jobkit_api") -> JobResult: ...


@overload
async def wait_async(target: Any, job_id: FlowRun, *, timeout: float = 30.0, poll: float = 1.0,
                     listen: bool | None = None, on_progress: ProgressCallback | None = None,
                     schema: str = "jobkit", api_schema: str = "jobkit_api") -> FlowResult: ...


async def wait_async(target: Any, job_id: UUID | str | FlowRun, *, timeout: float = 30.0, poll: float = 1.0,
                     listen: bool | None = None, on_progress: ProgressCallback | None = None,
                     schema: str = "jobkit", api_schema: str = "jobkit_api") -> JobResult | FlowResult:
    """:func:`wait` for asyncio. ``target``: a URL (LISTEN on a connection of its own unless
    ``listen=False``), your psycopg AsyncConnection (polled), a supabase-py AsyncClient (polled
    over RPC) or a worker Backend (PostgresBackend, SupabaseBackend, MemoryBackend: polled).
    Given a FlowRun, :func:`wait_flow_async`."""
    if isinstance(job_id, FlowRun):
        _no_progress(on_progress)
        return await wait_flow_async(target, job_id, timeout=timeout, poll=poll, listen=listen, schema=schema,
                                     api_schema=api_schema)
    job = _uuid(job_id)
    watch = _Watch(job, timeout, poll, on_progress)
    if hasattr(target, "state") and hasattr(target, "claim"):  # a worker Backend
        return await watch.aio(lambda: target.state(job), None)
    if _is_supabase(target):
        async def read_rpc() -> JobResult | None:
            response = target.schema(api_schema).rpc("state", {"p_id": str(job)}).execute()
            return _from_rpc((await response if inspect.isawaitable(response) else response).data)
        return await watch.aio(read_rpc, None)
    statement = Statements(schema).state(job)
    if isinstance(target, psycopg.AsyncConnection):
        own = AsyncSession(target)
        return await watch.aio(lambda: own.run(statement), None)
    if not isinstance(target, str):
        raise ConfigError(f"cannot wait on a {type(target).__name__}",
                          hint="pass a database URL, a psycopg AsyncConnection, a supabase-py client "
                               "or a worker backend")
    async with AsyncSession.connect(target) as session:
        notes = None
        if listen is not False:
            await session.listen(done_channel(schema))
            await session.run(Statements(schema).wait_on([job], _registration(timeout)))
            notes = session.notifies
        return await watch.aio(lambda: session.run(statement), notes)


def wait_flow(target: Any, flow: FlowRun | UUID | str, *, timeout: float = 30.0, poll: float = 1.0,
              listen: bool | None = None, schema: str = "jobkit",
              api_schema: str = "jobkit_api") -> FlowResult:
    """Block until every job of the flow ended (completed, failed, dead or cancelled); its
    :class:`~jobkit.jobs.FlowResult`: each job's JobResult in order, what succeeded and what failed
    (a failed job is reported there, not raised). WaitTimeout when time is up first (naming the
    jobs not ended), NotFound for a flow id no job has. ``flow``: the FlowRun :func:`jobkit.flow`
    returned, or its id. ``target``, ``listen`` and ``poll`` as :func:`wait`."""
    watch = FlowWatch(flow_id(flow), timeout, poll)
    if _is_supabase(target):
        def read_rpc() -> list[JobResult]:
            return _states_from_rpc(target.schema(api_schema).rpc("flow_state", {"p_id": str(watch.flow)})
                                    .execute().data)
        return watch.sync(read_rpc, None, None)
    with ExitStack() as stack:
        session = _session(stack, target)
        statements = Statements(schema)
        register: Callable[[list[UUID]], None] | None = None
        notes: Callable[[float], list[tuple[str, str]]] | None = None
        if _owned(target) and listen is not False:
            session.listen(done_channel(schema))
            def register(ids: list[UUID]) -> None:
                session.run(statements.wait_on(ids, _registration(timeout)))
            notes = session.notifies
        elif listen:
            raise ConfigError("listen=True needs a database URL: wait LISTENs on a connection of its own",
                              hint="pass the URL, or leave listen unset to poll your connection")
        return watch.sync(lambda: session.run(statements.flow_state(watch.flow)), register, notes)


async def wait_flow_async(target: Any, flow: FlowRun | UUID | str, *, timeout: float = 30.0,
                          poll: float = 1.0, listen: bool | None = None, schema: str = "jobkit",
                          api_schema: str = "jobkit_api") -> FlowResult:
    """:func:`wait_flow` for asyncio; ``target`` as :func:`wait_async` (a worker Backend included:
    MemoryBackend, so an InlineQueue's ``queue.backend``)."""
    watch = FlowWatch(flow_id(flow), timeout, poll)
    if hasattr(target, "flow_state") and hasattr(target, "claim"):  # a worker Backend
        return await watch.aio(lambda: target.flow_state(watch.flow), None, None)
    if _is_supabase(target):
        async def read_rpc() -> list[JobResult]:
            response = target.schema(api_schema).rpc("flow_state", {"p_id": str(watch.flow)}).execute()
            return _states_from_rpc((await response if inspect.isawaitable(response) else response).data)
        return await watch.aio(read_rpc, None, None)
    statement = Statements(schema).flow_state(watch.flow)
    if isinstance(target, psycopg.AsyncConnection):
        own = AsyncSession(target)
        return await watch.aio(lambda: own.run(statement), None, None)
    if not isinstance(target, str):
        raise ConfigError(f"cannot wait on a {type(target).__name__}",
                          hint="pass a database URL, a psycopg AsyncConnection, a supabase-py client "
                               "or a worker backend")
    async with AsyncSession.connect(target) as session:
        if listen is False:
            return await watch.aio(lambda: session.run(statement), None, None)
        await session.listen(done_channel(schema))

        async def register(ids: list[UUID]) -> None:
            await session.run(Statements(schema).wait_on(ids, _registration(timeout)))
        return await watch.aio(lambda: session.run(statement), register, session.notifies)


class _Watch:
    """One wait: its deadline, the backoff between reads, the progress last reported."""

    def __init__(self, job: UUID, timeout: float, poll: float, on_progress: ProgressCallback | None) -> None:
        if timeout < 0 or poll <= 0:
            raise ConfigError(f"timeout must be >= 0 and poll > 0, got timeout={timeout}, poll={poll}")
        self.job = job
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.poll = poll
        self.on_progress = on_progress
        self.pause = FIRST_POLL
        self.reads = 0  # how often the job's state was read (tests check LISTEN saved reads)
        self._seen: Progress | None = None

    def sync(self, read: Callable[[], JobResult | None],
             notes: Callable[[float], list[tuple[str, str]]] | None) -> JobResult:
        while True:
            self.reads += 1
            state = self.check(read())
            if state is not None:
                return state
            wait_for = self.next_pause(notes is not None)
            if notes is None:
                time.sleep(wait_for)
                continue
            until = time.monotonic() + wait_for
            while (left := until - time.monotonic()) > 0:
                if any(self.mine(payload) for _channel, payload in notes(left)):
                    break

    async def aio(self, read: Callable[[], Any], notes: Callable[[float], Any] | None) -> JobResult:
        while True:
            self.reads += 1
            state = self.check(await read())
            if state is not None:
                return state
            wait_for = self.next_pause(notes is not None)
            if notes is None:
                await asyncio.sleep(wait_for)
                continue
            until = time.monotonic() + wait_for
            while (left := until - time.monotonic()) > 0:
                if any(self.mine(payload) for payload in await notes(left)):
                    break

    def check(self, state: JobResult | None) -> JobResult | None:
        """The result when the job completed; raises when it finished otherwise or time is up."""
        if state is None:
            raise NotFound(f"no job {self.job}",
                           hint="check the id (and the schema); wait on a flow's id with jobkit.wait_flow")
        if self.on_progress is not None and state.progress is not None and state.progress != self._seen:
            self._seen = state.progress
            self.on_progress(state.progress)
        if state.status == Status.COMPLETED:
            return state
        if state.finished:
            raise JobFailed(f"job {self.job} is {state.status.value} after {state.attempts} attempt(s): "
                            f"{_last_line(state.error)}", job=state)
        if time.monotonic() >= self.deadline:
            raise WaitTimeout(f"job {self.job} did not finish within {self.timeout:g}s "
                              f"(it is {state.status.value}{_why(state)})", hint=_timeout_hint(state),
                              job_id=self.job, status=state.status.value)
        return None

    def next_pause(self, listening: bool) -> float:
        cap = LISTENING_POLL if listening else self.poll
        if self.on_progress is not None:
            cap = min(cap, PROGRESS_POLL)
        pause, self.pause = min(self.pause, cap), min(self.pause * 2, cap)
        return max(0.0, min(pause, self.deadline - time.monotonic()))

    def mine(self, payload: str) -> bool:
        return str(self.job) in payload.split(",")


def _registration(timeout: float) -> timedelta:
    """How long a waiter's registration lasts: the wait, plus a margin for clock and commit delays."""
    return timedelta(seconds=timeout + REGISTRATION_MARGIN)


def _session(stack: ExitStack, target: Any) -> Session:
    if isinstance(target, Session):
        return target
    wrapped = Session.wrap(target)
    if wrapped is not None:
        return wrapped
    if isinstance(target, str):
        target = Database(target)
    if not isinstance(target, Database):
        raise ConfigError(f"cannot wait on a {type(target).__name__}",
                          hint="pass a database URL, a psycopg connection or a supabase-py client")
    return stack.enter_context(target.session())


def _owned(target: Any) -> bool:
    """wait() opens the connection itself (so it may LISTEN on it)."""
    return isinstance(target, (str, Database))


def _is_supabase(target: Any) -> bool:
    return hasattr(target, "rpc") and hasattr(target, "schema") and not isinstance(target, (str, Session))


def _from_rpc(rows: Any) -> JobResult | None:
    from .worker.backends.supabase import state_from_rpc  # supabase-py only when it is used

    return state_from_rpc(rows)


def _states_from_rpc(rows: Any) -> list[JobResult]:
    from .worker.backends.supabase import states_from_rpc  # supabase-py only when it is used

    return states_from_rpc(rows)


def _no_progress(on_progress: ProgressCallback | None) -> None:
    if on_progress is not None:
        raise ConfigError("on_progress is for a wait on one job, not on a flow",
                          hint="wait on the job whose progress you want: jobkit.wait(target, run[handle])")


def _uuid(job_id: UUID | str) -> UUID:
    try:
        return job_id if isinstance(job_id, UUID) else UUID(str(job_id))
    except ValueError:
        raise ConfigError(f"not a job id: {job_id!r}", hint="pass the uuid enqueue returned") from None


def _last_line(error: str | None) -> str:
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no error recorded"


def _why(state: JobResult) -> str:
    """What a timed-out wait's message adds: a job still pending at attempt 0 was never claimed."""
    if state.status == Status.PENDING and state.attempts == 0:
        return ": no worker has claimed it yet"
    return ""


def _timeout_hint(state: JobResult) -> str | None:
    if state.status == Status.PENDING and state.attempts == 0:
        return ("is a worker serving this job type? start one (`jobkit worker serve jobs:jobs`), "
                "and check wake-ups with `jobkit status` and `jobkit doctor`")
    return None
