"""The direct PostgreSQL backend: the lifecycle's Statements (lifecycle.py) on psycopg's async pool,
one statement per call.

Works through Supavisor's session pooler (port 5432). The transaction pooler (port 6543) has no
LISTEN, no session advisory locks and no prepared statements: use ``prepare=False`` there, and the
pg_net transport rather than NOTIFY.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ...connector import Row
from ...connector.aio import AsyncPool
from ...jobs import Claimed, Done, Failure, Job, JobResult, NewJob, TraceContext
from ...lifecycle import Statements


class PostgresBackend:
    """The worker's lifecycle over a psycopg connection pool."""

    def __init__(self, url: str, schema: str = "jobkit", *, max_size: int = 10, prepare: bool = True) -> None:
        self.pool = AsyncPool(url, max_size=max_size, prepare=prepare)
        self.sql = Statements(schema)

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close()

    async def enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> UUID:
        return await self.pool.run(self.sql.enqueue(job, trace_context))

    async def enqueue_many(self, jobs: Sequence[NewJob],
                           trace_context: TraceContext | None = None) -> list[UUID]:
        return await self.pool.run(self.sql.enqueue_many(jobs, trace_context)) if jobs else []

    async def claim(self, job_type: str, limit: int, worker: str, lease: timedelta,
                    rate_key: str | None = None, max_attempts: int | None = None) -> list[Claimed]:
        return await self.pool.run(self.sql.claim(job_type, limit, worker, lease, rate_key, max_attempts))

    async def complete(self, done: Sequence[Done]) -> set[UUID]:
        return await self.pool.run(self.sql.complete(done))

    async def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]:
        return await self.pool.run(self.sql.fail(failures))

    async def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool:
        return await self.pool.run(self.sql.snooze(job_id, attempt, delay))

    async def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> set[UUID]:
        return await self.pool.run(self.sql.extend(running, by))

    async def release(self, running: Sequence[tuple[UUID, int]]) -> set[UUID]:
        return await self.pool.run(self.sql.release(running))

    async def running_check(self, running: Sequence[tuple[UUID, int]]) -> dict[UUID, str]:
        return await self.pool.run(self.sql.running_check(running)) if running else {}

    async def get(self, job_id: UUID) -> Job | None:
        return await self.pool.run(self.sql.get(job_id))

    async def state(self, job_id: UUID) -> JobResult | None:
        return await self.pool.run(self.sql.state(job_id))

    async def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        return await self.pool.run(self.sql.progress(reports)) if reports else set()

    async def take_tokens(self, key: str, want: int) -> int:
        return await self.pool.run(self.sql.take_tokens(key, want))

    async def token_wait(self, key: str) -> float:
        return await self.pool.run(self.sql.token_wait(key))

    async def due_count(self, job_type: str) -> int:
        return await self.pool.run(self.sql.due_count(job_type))

    async def due_types(self) -> list[str]:
        return await self.pool.run(self.sql.due_types())

    async def next_due(self, job_type: str) -> float | None:
        return await self.pool.run(self.sql.next_due(job_type))

    async def backlog(self) -> list[Row]:
        """Per type: pending jobs due now and the oldest one's age (for /metrics, cached there)."""
        return await self.pool.run(self.sql.backlog())

    async def worker_keys(self) -> list[str]:
        return await self.pool.run(self.sql.worker_keys())

    async def ping(self) -> None:
        await self.pool.run(self.sql.ping())

    async def record_types(self, types: Sequence[str]) -> None:
        await self.pool.run(self.sql.record_types(types))
    async def consume_wake(self, nonce: str, expires_at: datetime) -> bool:
        return await self.pool.run(self.sql.consume_wake(nonce, expires_at))

    async def wake_draining(self, job_type: str, until: timedelta) -> None:
        await self.pool.run(self.sql.wake_draining(job_type, until))

    async def wake_idle(self, job_type: str, handoff: bool = False) -> bool:
        return await self.pool.run(self.sql.wake_idle(job_type, handoff))

    def listen(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """A LISTEN session on ``channel`` (its own connection): the NOTIFY wake-ups."""
        return self.pool.listen(channel)
