"""The connector seam: the only module that imports psycopg.

Everything else talks to the database through :class:`Database` and :class:`Session`, with SQL text
from the packaged .sql files and values as bound parameters. Driver errors become jobkit errors
here, with any password in a URL redacted.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString, Protocol, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pgsql
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Format
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from ..exceptions import ConnectionFailed, DatabaseError, PrerequisiteError

Row = dict[str, Any]
Params = Mapping[str, Any] | Sequence[Any] | None
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Runnable(Protocol[T_co]):
    """What Session.run and AsyncPool.run take: lifecycle.Statement."""

    @property
    def sql(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def read(self) -> Callable[[list[Any]], T_co]: ...
    @property
    def binary(self) -> bool: ...
    @property
    def dicts(self) -> bool: ...
_PASSWORD_RE = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


def redact(text: str) -> str:
    """Hide the password of any URL in ``text``."""
    return _PASSWORD_RE.sub(r"\1***@", text)


def json_param(value: Any) -> Jsonb:
    """Wrap a Python value for a jsonb parameter."""
    return Jsonb(value)


class UuidArray:
    """A uuid[] parameter already in PostgreSQL's binary array form (:func:`uuid_array`)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _UuidArrayDumper(Dumper):
    format = Format.BINARY
    oid = 2951  # uuid[] (a built-in type: the same oid in every database)

    def dump(self, obj: Any) -> bytes:
        return bytes(obj.data)


#: A one-dimensional binary array's header: ndim, has-nulls, element oid (uuid), length, lower bound.
_ARRAY_HEAD = struct.Struct("!iiIii")


def uuid_array(raw: bytes) -> UuidArray:
    """UUIDs laid end to end (16 bytes each) as one binary uuid[] parameter, which the server reads
    with uuid_recv (a copy) instead of parsing text (issue 23). Each element's length and bytes are
    laid out by extended-slice assignments: 17 C-level passes, no Python loop a UUID."""
    n = len(raw) // 16
    body = bytearray(20 * n)
    body[3::20] = b"\x10" * n
    for j in range(16):
        body[4 + j::20] = raw[j::16]
    if not n:  # an empty array has no dimension: the header's first three fields only
        return UuidArray(struct.pack("!iiI", 0, 0, 2950))
    return UuidArray(_ARRAY_HEAD.pack(1, 0, 2950, n, 1) + body)


def adapt(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Teach a connection jobkit's own parameter types (UuidArray). Pool connections get it when
    made; a caller's connection when a Session is about to send one (Session.adapt)."""
    conn.adapters.register_dumper(UuidArray, _UuidArrayDumper)


class Session:
    """One open connection. Statements run in autocommit unless inside :meth:`transaction`."""

    def __init__(self, conn: psycopg.Connection[Any], *, notices: bool = True) -> None:
        self._conn = conn
        self.notices: list[str] = []  # the server's notices (deploy reads them); not kept by wrap
        if notices:
            conn.add_notice_handler(lambda diag: self.notices.append(diag.message_primary or ""))

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    @classmethod
    def wrap(cls, conn: object) -> Session | None:
        """A Session over the caller's own psycopg connection (its transaction is theirs), or
        None when ``conn`` is not one. It adds no notice handler: a handler per call (each
        jobkit.enqueue(conn, ...)) stayed on the caller's connection, with its Session, for good."""
        return cls(conn, notices=False) if isinstance(conn, psycopg.Connection) else None

    def execute(self, sql: str, params: Params = None) -> None:
        with _translated():
            self._conn.execute(_q(sql), params)

    def execute_count(self, sql: str, params: Params = None) -> int:
        """Run one statement; return how many rows it touched (a batched backfill's progress)."""
        with _translated(), self._conn.cursor() as cur:
            return int(cur.execute(_q(sql), params).rowcount)

    def all(self, sql: str, params: Params = None) -> list[Row]:
        with _translated(), self._conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(_q(sql), params).fetchall()

    def tuples(self, sql: str, params: Params = None, *, binary: bool = False) -> list[tuple[Any, ...]]:
        """Rows as plain tuples in the query's column order (no dict per row); ``binary`` asks for
        binary results (uuids and ints decode faster)."""
        with _translated(), self._conn.cursor(row_factory=tuple_row, binary=binary) as cur:
            return cur.execute(_q(sql), params).fetchall()

    def one(self, sql: str, params: Params = None) -> Row | None:
        with _translated(), self._conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(_q(sql), params).fetchone()

    def scalar(self, sql: str, params: Params = None) -> Any:
        row = self.one(sql, params)
        return None if row is None else next(iter(row.values()))

    def adapt(self) -> None:
        """Teach the connection jobkit's own parameter types: before a statement that sends one
        (a bulk enqueue's ids), so that no other statement pays for it."""
        adapt(self._conn)

    def run(self, statement: Runnable[T]) -> T:
        """Run one lifecycle Statement (lifecycle.py) and read its rows."""
        if statement.dicts:
            return statement.read(self.all(statement.sql, statement.params))
        return statement.read(self.tuples(statement.sql, statement.params, binary=statement.binary))

    def script(self, sql: str) -> None:
        """Run a multi-statement script (DDL) with no parameters, so ``%`` needs no escaping."""
        with _translated(), self._conn.cursor() as cur:
            cur.execute(_q(sql), prepare=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with _translated(), self._conn.transaction():
            yield self

    def execute_with_identifiers(self, template: str, params: Params = None, **identifiers: str) -> None:
        """Run ``template`` with ``{name}`` placeholders filled by quoted identifiers."""
        query = pgsql.SQL(_q(template)).format(
            **{key: pgsql.Identifier(value) for key, value in identifiers.items()})
        with _translated():
            self._conn.execute(query, params)

    def execute_utility(self, template: str, *, identifiers: Mapping[str, tuple[str, ...]],
                        literals: Mapping[str, str] | None = None) -> None:
        """Run a utility statement that takes no parameters (COMMENT, DROP ...): ``{name}``
        placeholders filled by quoted identifiers (a tuple of two is schema-qualified) or literals."""
        parts: dict[str, pgsql.Composable] = {
            key: pgsql.Identifier(*value) for key, value in identifiers.items()}
        parts.update({key: pgsql.Literal(value) for key, value in (literals or {}).items()})
        with _translated():
            self._conn.execute(pgsql.SQL(_q(template)).format(**parts))

    def listen(self, channel: str) -> None:
        self.execute_with_identifiers("LISTEN {channel}", channel=channel)

    def notifies(self, timeout: float) -> list[tuple[str, str]]:
        """Wait up to ``timeout`` s for notifications; return (channel, payload) pairs."""
        with _translated():
            gen = self._conn.notifies(timeout=timeout, stop_after=1)
            return [(n.channel, n.payload) for n in gen]

    @property
    def backend_pid(self) -> int:
        return int(self._conn.info.backend_pid)


class Database:
    """A connection factory for one database URL."""

    def __init__(self, url: str, *, application_name: str = "jobkit") -> None:
        self.url = url
        self.application_name = application_name

    @property
    def display_url(self) -> str:
        return redact(self.url)

    @property
    def dbname(self) -> str:
        return str(conninfo_to_dict(self.url).get("dbname") or "")

    def with_dbname(self, dbname: str) -> Database:
        """The same server and credentials, another database."""
        return Database(make_conninfo(self.url, dbname=dbname), application_name=self.application_name)

    @contextmanager
    def session(self, *, connect_timeout: int = 10) -> Iterator[Session]:
        conn = self._connect(connect_timeout)
        try:
            yield Session(conn)
        finally:
            conn.close()

    def _connect(self, connect_timeout: int) -> psycopg.Connection[Row]:
        try:
            return psycopg.connect(
                self.url, autocommit=True, row_factory=dict_row,
                connect_timeout=connect_timeout, application_name=self.application_name,
            )
        except psycopg.ProgrammingError as exc:
            raise ConnectionFailed(
                f"invalid database URL {self.display_url}: {_first_line(exc)}",
                hint="use postgresql://user:password@host:port/dbname",
            ) from None
        except psycopg.OperationalError as exc:
            raise ConnectionFailed(f"cannot connect to {self.display_url}: {_first_line(exc)}") from None


class SessionPool:
    """A small pool of sessions for a long-running reader such as the dashboard: no prepared
    statements (each query is planned with its values, so optional filters drop out of the plan)
    and a statement timeout, so one slow page cannot hold a connection for long. JIT is off: it
    compiled for longer than the dashboard's largest query (a day of completions) ran."""

    def __init__(self, url: str, *, size: int = 4, statement_timeout_ms: int = 15000,
                 application_name: str = "jobkit dashboard") -> None:
        from psycopg_pool import ConnectionPool

        self.display_url = redact(url)

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.prepare_threshold = None

        self._pool = ConnectionPool(
            url, min_size=1, max_size=size, open=False, configure=configure,
            kwargs={"autocommit": True, "row_factory": dict_row, "application_name": application_name,
                    "options": f"-c statement_timeout={int(statement_timeout_ms)} -c jit=off"})

    def open(self, timeout: float = 10.0) -> None:
        from psycopg_pool import PoolTimeout

        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout:
            self._pool.close()
            raise ConnectionFailed(f"cannot connect to {self.display_url} within {timeout:g} s") from None

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection(timeout=10.0) as conn:
                yield Session(conn)
        except PoolTimeout:
            raise ConnectionFailed(f"no database connection to {self.display_url} within 10 s") from None


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except pg_errors.InsufficientPrivilege as exc:
        raise PrerequisiteError(
            f"permission denied: {_first_line(exc)}",
            hint="connect as the database owner (on Supabase: the postgres role)",
        ) from exc
    except UnicodeEncodeError as exc:  # a lone surrogate in a str parameter (never valid UTF-8)
        raise DatabaseError(f"a value cannot be sent as UTF-8: {exc}",
                            hint="strings sent to the database must be valid Unicode text") from exc
    except psycopg.Error as exc:
        if connection_lost(exc):
            raise ConnectionFailed(f"lost the database connection: {_first_line(exc)}") from exc
        raise DatabaseError(_first_line(exc), hint=_hint(exc)) from exc


#: SQLSTATEs that mean the session is gone (class 08, and the server shutting down or starting).
_LOST_STATES = ("57P01", "57P02", "57P03")


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` means the connection is gone, not that the statement failed. psycopg files
    resource and limit errors (classes 53, 54, 57014) under OperationalError too: a result too
    large to store is not a lost connection."""
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError) or isinstance(exc, psycopg.InterfaceError)
    return state.startswith("08") or state in _LOST_STATES


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the driver error behind a jobkit error, if any."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) if isinstance(cause, psycopg.Error) else None


#: jobkit's constraints a caller's value can break, and what to do instead.
_CONSTRAINT_HINTS = {
    "jobs_scheduled_for_finite": "run_at must be a finite time: pass a real timestamp, not 'infinity'",
    "jobs_scheduled_for_year_9999": "run_at must be before 9999-12-31T00:00:00Z (jobkit's times end in 9999)",
    "jobs_type_not_empty": "give the job a type",
}


def _hint(exc: psycopg.Error) -> str:
    diag = exc.diag
    return diag.message_hint or _CONSTRAINT_HINTS.get(diag.constraint_name or "", "")


def _first_line(exc: Exception) -> str:
    return redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)


def _q(sql: str) -> LiteralString:
    # Query text only ever comes from jobkit's packaged .sql files (see queries.py / render.py);
    # mypy treats LiteralString as str, so this is the one place that vouches for it.
    return sql
