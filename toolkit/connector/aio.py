"""The async side of the connector seam: a psycopg connection pool for the worker.

Queries come from the packaged .sql files; values are bound parameters. psycopg prepares a
statement after it has run a few times on a connection, which is what the hot path wants; behind
Supavisor's transaction pooler (port 6543) prepared statements break, so ``prepare=False`` turns
them off. A connection that breaks (a server restart) fails the statement it was running with
ConnectionFailed and leaves the pool; the next statement gets a fresh one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from json.scanner import c_make_scanner  # type: ignore[attr-defined]
from typing import Any

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..exceptions import ConnectionFailed
from . import Params, Row, Runnable, T, _q, _translated, adapt, redact

_decoder = json.JSONDecoder()
_decode = _decoder.decode
#: The C scanner JSONDecoder.decode calls, called directly: decode's two Python frames and two
#: whitespace regex matches cost twice what scanning a small payload does (issue 23).
_scan: Any = None if c_make_scanner is None else c_make_scanner(_decoder)
LISTEN_CHECK = 15.0  # seconds of silence after which a LISTEN connection is checked
#: TCP keepalives, so that a connection to a vanished server fails instead of hanging.
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def _loads(data: str | bytes) -> Any:
    """json.loads for the UTF-8 bytes psycopg hands over, without json.loads's encoding sniffing
    (a tenth of a no-op job's time in the worker went to decoding its payload). jsonb's text has
    no whitespace around the value: it is scanned at once; anything else (a json column keeps its
    input's spaces) goes through decode, which also raises for what is not one JSON value."""
    text = data if isinstance(data, str) else data.decode()
    if _scan is None:
        return _decode(text)
    try:
        value, end = _scan(text, 0)
    except StopIteration:  # nothing to scan at 0: whitespace first, or empty
        return _decode(text)
    return value if end == len(text) else _decode(text)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_loads, conn)
    adapt(conn)


class AsyncSession:
    """One async connection, the caller's own or one opened here: statements run in its current
    transaction (the caller commits), for producers on asyncio (``jobkit.enqueue_async``)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    def adapt(self) -> None:
        """As Session.adapt: jobkit's own parameter types, before a statement that sends one."""
        adapt(self._conn)

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str, *, application_name: str = "jobkit") -> AsyncIterator[AsyncSession]:
        """An autocommit connection to ``url`` for the duration of the block."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, application_name=application_name)
        except psycopg.ProgrammingError as exc:
            raise ConnectionFailed(f"invalid database URL {redact(url)}: {exc}",
                                   hint="use postgresql://user:password@host:port/dbname") from None
        except psycopg.OperationalError as exc:
            raise ConnectionFailed(f"cannot connect to {redact(url)}: {str(exc).splitlines()[0]}") from None
        try:
            yield cls(conn)
        finally:
            await conn.close()

    async def listen(self, channel: str) -> None:
        with _translated():
            await self._conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))

    async def notifies(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` s for a notification; their payloads (none after the timeout)."""
        with _translated():
            return [n.payload async for n in self._conn.notifies(timeout=timeout, stop_after=1)]

    async def run(self, statement: Runnable[T]) -> T:
        """Run one lifecycle Statement (lifecycle.py) and read its rows."""
        with _translated():
            cur = self._conn.cursor(row_factory=dict_row if statement.dicts else tuple_row,
                                    binary=statement.binary)
            await cur.execute(_q(statement.sql), statement.params)
            return statement.read(await cur.fetchall())


class AsyncPool:
    """A pool of autocommit connections; each call is one statement, one round trip."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10,
                 application_name: str = "jobkit worker", prepare: bool = True) -> None:
        self.url = url
        self.application_name = application_name
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row,
                                  "application_name": application_name, **KEEPALIVES}
        if not prepare:
            kwargs["prepare_threshold"] = None
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Row]] = AsyncConnectionPool(
            url, min_size=min_size, max_size=max_size, kwargs=kwargs, open=False, configure=_configure,
            connection_class=psycopg.AsyncConnection[Row], timeout=10.0, reconnect_timeout=float("inf"))

    async def open(self, timeout: float = 10.0) -> None:
        try:
            await self._pool.open(wait=True, timeout=timeout)
        except psycopg.OperationalError as exc:  # pragma: no cover - depends on the server
            raise ConnectionFailed(f"cannot connect to {redact(self.url)}: {exc}") from None
        except PoolTimeout:
            await self._pool.close()
            raise ConnectionFailed(f"cannot connect to {redact(self.url)} within {timeout:.0f}s") from None

    async def close(self) -> None:
        await self._pool.close()

    async def all(self, sql: str, params: Params = None) -> list[Row]:
        with _pooled():
            async with self._pool.connection() as conn:
                cur = await conn.execute(_q(sql), params)
                return await cur.fetchall()

    async def tuples(self, sql: str, params: Params = None, *, binary: bool = False) -> list[tuple[Any, ...]]:
        """Rows as plain tuples, in the query's column order (the hot path: no dict per row);
        ``binary`` asks for binary results (uuids and ints decode faster)."""
        with _pooled():
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=tuple_row, binary=binary)
                await cur.execute(_q(sql), params)
                return await cur.fetchall()

    async def run(self, statement: Runnable[T]) -> T:
        """Run one lifecycle Statement (lifecycle.py) and read its rows."""
        if statement.dicts:
            return statement.read(await self.all(statement.sql, statement.params))
        return statement.read(await self.tuples(statement.sql, statement.params, binary=statement.binary))

    async def one(self, sql: str, params: Params = None) -> Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def scalar(self, sql: str, params: Params = None) -> Any:
        row = await self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Row]]:
        """A pooled connection inside one transaction (committed when the block ends, rolled back
        when it raises): a transactional step's work and its record (ctx.transaction_step)."""
        with _pooled():
            async with self._pool.connection() as conn, conn.transaction():
                yield conn

    @asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[AsyncIterator[str]]:
        """LISTEN on ``channel`` over a dedicated connection; LISTEN is in place when this enters.
        Yields the notifications' payloads; a broken connection raises ConnectionFailed (it is
        checked after LISTEN_CHECK seconds without a notification)."""
        with _translated():
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=10,
                application_name=f"{self.application_name} (listen)", **KEEPALIVES)
        try:
            with _translated():
                raw = await _unconverted(conn)
                await conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
            yield _payloads(conn, raw)
        finally:
            await conn.close()


UNDECODABLE = "\ufffd"  # what a payload that is not UTF-8 (possible in SQL_ASCII) is read as


async def _unconverted(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Have payloads arrive as the server stores them, so that the driver never fails to decode one
    (it decodes a whole batch at once: one bad payload would lose the batch). A SQL_ASCII database
    stores any bytes: they arrive as Latin-1, which decodes every byte, and ``True`` says each
    payload is then decoded on its own (``_decoded``)."""
    server = conn.info.parameter_status("server_encoding") or "UTF8"
    raw = server == "SQL_ASCII"
    wanted = "LATIN1" if raw else server
    if conn.info.parameter_status("client_encoding") != wanted:
        await conn.execute("select pg_catalog.set_config('client_encoding', %s, false)", (wanted,))
    return raw


def _decoded(payload: str) -> str:
    """A payload that arrived as Latin-1 (its raw bytes) as UTF-8 text, else UNDECODABLE."""
    try:
        return payload.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return UNDECODABLE


async def _payloads(conn: psycopg.AsyncConnection[Any], raw: bool) -> AsyncIterator[str]:
    while True:
        got = False
        with _translated():
            async for note in conn.notifies(timeout=LISTEN_CHECK):
                got = True
                yield _decoded(note.payload) if raw else note.payload
        if not got:
            with _translated():
                await conn.execute("select 1")  # silence: make sure the connection still works


@contextmanager
def _pooled() -> Iterator[None]:
    """Driver errors become jobkit errors; so does waiting too long for a pooled connection."""
    try:
        with _translated():
            yield
    except PoolTimeout as exc:
        raise ConnectionFailed(f"no database connection within the pool's timeout: {exc}") from None
