"""The async side of the connector seam: a psycopg connection pool for the worker.

Queries come from the packaged .sql files; values are bound parameters. psycopg prepares a
statement after it has run a few times on a connection, which is what the hot path wants; behind
Supavisor's transaction pooler (port 6543) prepared statements break, so ``prepare=False`` turns
them off.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..exceptions import ConnectionFailed
from . import Params, Row, _q, _translated, redact

_decode = json.JSONDecoder().decode


def _loads(data: str | bytes) -> Any:
    """json.loads for the UTF-8 bytes psycopg hands over, without json.loads's encoding sniffing
    (a tenth of a no-op job's time in the worker went to decoding its payload)."""
    return _decode(data if isinstance(data, str) else data.decode())


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_loads, conn)


class AsyncPool:
    """A pool of autocommit connections; each call is one statement, one round trip."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10,
                 application_name: str = "jobkit worker", prepare: bool = True) -> None:
        self.url = url
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row,
                                  "application_name": application_name}
        if not prepare:
            kwargs["prepare_threshold"] = None
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Row]] = AsyncConnectionPool(
            url, min_size=min_size, max_size=max_size, kwargs=kwargs, open=False, configure=_configure,
            connection_class=psycopg.AsyncConnection[Row])

    async def open(self, timeout: float = 10.0) -> None:
        try:
            await self._pool.open(wait=True, timeout=timeout)
        except psycopg.OperationalError as exc:  # pragma: no cover - depends on the server
            raise ConnectionFailed(f"cannot connect to {redact(self.url)}: {exc}") from None
        except PoolTimeout:
            raise ConnectionFailed(f"cannot connect to {redact(self.url)} within {timeout:.0f}s") from None

    async def close(self) -> None:
        await self._pool.close()

    async def all(self, sql: str, params: Params = None) -> list[Row]:
        async with self._pool.connection() as conn:
            with _translated():
                cur = await conn.execute(_q(sql), params)
                return await cur.fetchall()

    async def tuples(self, sql: str, params: Params = None, *, binary: bool = False) -> list[tuple[Any, ...]]:
        """Rows as plain tuples, in the query's column order (the hot path: no dict per row);
        ``binary`` asks for binary results (uuids and ints decode faster)."""
        async with self._pool.connection() as conn:
            with _translated():
                cur = conn.cursor(row_factory=tuple_row, binary=binary)
                await cur.execute(_q(sql), params)
                return await cur.fetchall()

    async def one(self, sql: str, params: Params = None) -> Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Params = None) -> Any:
        row = await self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    async def notifications(self, channel: str) -> AsyncIterator[tuple[str, str]]:
        """LISTEN on ``channel`` over a dedicated connection; yields (channel, payload)."""
        from psycopg import sql as pgsql

        conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        try:
            with _translated():
                await conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
            async for note in conn.notifies():
                yield note.channel, note.payload
        finally:
            await conn.close()
