"""The direct PostgreSQL backend: the lifecycle's Statements (lifecycle.py) on psycopg's async pool,
one statement per call.

Works through Supavisor's session pooler (port 5432). The transaction pooler (port 6543) has no
LISTEN, no session advisory locks and no prepared statements: use ``prepare=False`` there, and the
pg_net transport rather than NOTIFY.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from functools import update_wrapper
from typing import Any, Concatenate, ParamSpec, TypeVar
from uuid import UUID

from ...connector import sqlstate
from ...connector.aio import AsyncPool
from ...exceptions import DatabaseError
from ...jobs import NewJob, StepRecord, TraceContext
from ...lifecycle import Statement, Statements

UNIQUE_VIOLATION = "23505"
P = ParamSpec("P")
T = TypeVar("T")


def step(make: Callable[Concatenate[Statements, P], Statement[T]],
         ) -> Callable[Concatenate[PostgresBackend, P], Coroutine[Any, Any, T]]:
    """A backend method that runs the Statement of the same name on the pool, one round trip
    (``claim = step(Statements.claim)``)."""
    async def run(self: PostgresBackend, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.pool.run(make(self.sql, *args, **kwargs))
    update_wrapper(run, make)  # its name, and inspect.signature shows the Statement's parameters
    return run


class PostgresBackend:
    """The worker's lifecycle over a psycopg connection pool: each step the Statement of its name."""

    def __init__(self, url: str, schema: str = "jobkit", *, max_size: int = 10, prepare: bool = True) -> None:
        self.pool = AsyncPool(url, max_size=max_size, prepare=prepare)
        self.sql = Statements(schema)
        self.prepare = prepare

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close()

    enqueue = step(Statements.enqueue)
    claim = step(Statements.claim)
    complete = step(Statements.complete)
    fail = step(Statements.fail)
    snooze = step(Statements.snooze)
    suspend = step(Statements.suspend)
    emit = step(Statements.emit)
    extend = step(Statements.extend)
    release = step(Statements.release)
    get = step(Statements.get)
    state = step(Statements.state)
    take_tokens = step(Statements.take_tokens)
    token_wait = step(Statements.token_wait)
    due_count = step(Statements.due_count)
    due_types = step(Statements.due_types)
    next_due = step(Statements.next_due)
    backlog = step(Statements.backlog)  # /metrics' backlog (cached there); not a Backend step
    worker_keys = step(Statements.worker_keys)
    ping = step(Statements.ping)
    record_types = step(Statements.record_types)
    worker_beat = step(Statements.worker_beat)
    worker_gone = step(Statements.worker_gone)
    worker_counts = step(Statements.worker_counts)  # /metrics' jobkit_workers; not a Backend step
    consume_wake = step(Statements.consume_wake)
    wake_draining = step(Statements.wake_draining)
    wake_idle = step(Statements.wake_idle)
    parents = step(Statements.parents)
    create_flow = step(Statements.create_flow)
    flow_state = step(Statements.flow_state)

    # Where an empty batch needs no round trip.
    async def enqueue_many(self, jobs: Sequence[NewJob],
                           trace_context: TraceContext | None = None) -> list[UUID]:
        return await self.pool.run(self.sql.enqueue_many(jobs, trace_context)) if jobs else []

    async def running_check(self, running: Sequence[tuple[UUID, int]]) -> dict[UUID, str]:
        return await self.pool.run(self.sql.running_check(running)) if running else {}

    async def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        return await self.pool.run(self.sql.progress(reports)) if reports else set()

    async def load_steps(self, job_ids: Sequence[UUID]) -> dict[tuple[UUID, str, int], Any]:
        return await self.pool.run(self.sql.load_steps(job_ids)) if job_ids else {}

    async def save_steps(self, steps: Sequence[StepRecord], hold: bool = False) -> set[tuple[UUID, int]]:
        """Plain steps' records go as one prepared statement of their own (save_steps_direct: no
        plpgsql call); a transactional step's (hold), a batch the direct form refuses (a record that
        meets a stored one) and unprepared sessions (the transaction pooler) call save_steps."""
        if not steps:
            return set()
        direct = None if hold or not self.prepare else self.sql.save_steps_direct(steps)
        if direct is not None:
            try:
                return await self.pool.run(direct)
            except DatabaseError as exc:
                if sqlstate(exc) != UNIQUE_VIOLATION:
                    raise
        return await self.pool.run(self.sql.save_steps(steps, hold))

    def listen(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """A LISTEN session on ``channel`` (its own connection): the NOTIFY wake-ups."""
        return self.pool.listen(channel)
