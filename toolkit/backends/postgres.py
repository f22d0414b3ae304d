"""The direct PostgreSQL backend: psycopg's async pool, named queries, one statement per call.

Works through Supavisor's session pooler (port 5432). The transaction pooler (port 6543) has no
LISTEN, no session advisory locks and no prepared statements: use ``prepare=False`` there, and the
pg_net transport rather than NOTIFY.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from uuid import UUID

from ..connector.aio import AsyncPool
from ..jobs import Claimed
from ..manager import Done, Failure, complete_params, fail_params, running_params
from ..queries import queries


class PostgresBackend:
    """Backend over a psycopg connection pool."""

    def __init__(self, url: str, schema: str = "jobkit", *, max_size: int = 10, prepare: bool = True) -> None:
        self.pool = AsyncPool(url, max_size=max_size, prepare=prepare)
        self.q = queries(schema)

    async def open(self) -> None:
        await self.pool.open()

    async def close(self) -> None:
        await self.pool.close()

    async def claim(self, job_type: str, limit: int, worker: str, lease: timedelta,
                    rate_key: str | None, max_attempts: int | None) -> list[Claimed]:
        rows = await self.pool.tuples(self.q["claim_jobs"], binary=True, params={
            "type": job_type, "limit": limit, "worker": worker, "lease": lease, "rate_key": rate_key,
            "max_attempts": max_attempts})
        return [Claimed._make(r) for r in rows]

    async def complete(self, done: Sequence[Done]) -> set[UUID]:
        return {r[0] for r in await self.pool.tuples(self.q["complete_jobs"], complete_params(done))}

    async def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]:
        rows = await self.pool.all(self.q["fail_jobs"], fail_params(failures))
        return {r["id"]: r["status"] for r in rows}

    async def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool:
        return bool(await self.pool.scalar(
            self.q["snooze_job"], {"id": job_id, "attempt": attempt, "delay": delay}))

    async def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> set[UUID]:
        rows = await self.pool.all(self.q["extend_leases"], {**running_params(running), "by": by})
        return {r["id"] for r in rows}

    async def release(self, running: Sequence[tuple[UUID, int]]) -> set[UUID]:
        rows = await self.pool.all(self.q["release_jobs"], running_params(running))
        return {r["id"] for r in rows}

    async def take_tokens(self, key: str, want: int) -> int:
        return int(await self.pool.scalar(self.q["take_tokens"], {"key": key, "want": want}) or 0)

    async def token_wait(self, key: str) -> float:
        return float(await self.pool.scalar(self.q["token_wait"], {"key": key}) or 0.0)

    async def due_count(self, job_type: str) -> int:
        return int(await self.pool.scalar(self.q["due_count"], {"type": job_type}) or 0)

    async def due_types(self) -> list[str]:
        return [r["type"] for r in await self.pool.all(self.q["due_types"])]

    async def next_due(self, job_type: str) -> float | None:
        value = await self.pool.scalar(self.q["next_due"], {"type": job_type})
        return None if value is None else float(value)

    async def worker_keys(self) -> list[str]:
        row = await self.pool.one(self.q["worker_keys"])
        return [str(v) for v in (row or {}).values() if v is not None]

    async def ping(self) -> None:
        await self.pool.scalar(self.q["ping"])

    def listen(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """A LISTEN session on ``channel`` (its own connection): the NOTIFY wake-ups."""
        return self.pool.listen(channel)
