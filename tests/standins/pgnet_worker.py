"""TEST STAND-IN for pg_net's background worker (supabase/pg_net 0.20.x) over tests/standins/pg_net.sql.

Like pg_net's worker it takes up to ``batch_size`` requests from net.http_request_queue (DELETE ...
RETURNING, committed before sending: a crash loses them, as in pg_net), sends them concurrently
(http/https only, redirects followed, one total ``timeout_milliseconds`` budget each), waits for the
whole batch, writes one net._http_response row per request (libcurl's error texts) and deletes
responses older than ``ttl``. Differences: it polls every ``poll_interval`` (20 ms) where pg_net is
woken at commit (so it also sends rows INSERTed directly into the queue); it is a client backend
named by application_name, not a 'pg_net worker' backend; it sends with httpx, so the timeout
message does not split DNS/handshake/HTTP time, only common failures get libcurl's texts, a body
that is not UTF-8 gets replacement characters, and timeouts <= 0 mean no timeout (as in libcurl).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psycopg
from psycopg.types.json import Jsonb

SQL_FILE = Path(__file__).with_name("pg_net.sql")
PG_NET_VERSION = "0.20.4"
APPLICATION_NAME = f"pg_net {PG_NET_VERSION} worker (test stand-in)"

# pg_net's consume_request_queue(), plus SKIP LOCKED so that two stand-ins never take the same row.
_TAKE = """
with rows as (select id from net.http_request_queue order by id limit %s for update skip locked)
delete from net.http_request_queue q using rows where q.id = rows.id
returning q.id, q.method, q.url, q.timeout_milliseconds,
          array(select key || ': ' || value from jsonb_each_text(q.headers)), q.body"""
_EXPIRE = """
with rows as (select ctid from net._http_response where created < now() - %s order by created limit %s)
delete from net._http_response r using rows where r.ctid = rows.ctid"""
_INSERT = """insert into net._http_response(id, status_code, content, headers, content_type, timed_out,
error_msg) values (%s, %s, %s, %s, %s, %s, %s)"""

Row = tuple[int, int | None, str | None, Jsonb | None, str | None, bool, str | None]


class PgNetStandIn:
    """Plays pg_net's background worker for one database, in a daemon thread."""

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 200,
        ttl: timedelta = timedelta(hours=6),
        poll_interval: float = 0.02,
    ) -> None:
        self.url, self.batch_size, self.ttl, self.poll_interval = url, batch_size, ttl, poll_interval
        self.error: BaseException | None = None  # what stopped the worker thread, if it crashed
        self._stop = threading.Event()
        self._connected = threading.Event()  # set once the worker's connection is open
        self._thread: threading.Thread | None = None

    def install(self) -> None:
        """(Re)create the `net` schema from pg_net.sql: drops any existing stand-in and its queue."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(SQL_FILE.read_text())  # a trusted file

    def start(self) -> PgNetStandIn:
        if self.running:
            return self
        self._stop.clear()
        self._connected.clear()
        self.error = None
        self._thread = threading.Thread(target=self._run, name=APPLICATION_NAME, daemon=True)
        self._thread.start()
        # Like pg_net's background worker, it is visible in pg_stat_activity once started.
        self._connected.wait(10.0)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in flight; raises if the worker thread had crashed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
            self._wait_gone(timeout)
        if self.error is not None:
            raise RuntimeError(f"the pg_net stand-in worker crashed: {self.error!r}") from self.error

    def _wait_gone(self, timeout: float) -> None:
        """A backend leaves pg_stat_activity a moment after its client disconnects: wait for it, so
        that whoever checks next sees the worker stopped."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url, autocommit=True) as conn:
            while time.monotonic() < deadline and conn.execute(
                "select exists (select 1 from pg_stat_activity"
                " where application_name = %s and datname = current_database())",
                (APPLICATION_NAME,),
            ).fetchone() == (True,):
                time.sleep(0.01)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def response(self, request_id: int, timeout: float = 5.0) -> dict[str, Any] | None:
        """Wait up to `timeout` s for the net._http_response row of a request; None if none came."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url, autocommit=True) as conn:
            while True:
                cur = conn.execute("select * from net._http_response where id = %s", (request_id,))
                row = cur.fetchone()
                if row is not None:
                    return {c.name: v for c, v in zip(cur.description or [], row, strict=True)}
                if time.monotonic() >= deadline or (self.error is not None and not self.running):
                    return None
                time.sleep(0.01)

    def __enter__(self) -> PgNetStandIn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(
            follow_redirects=True, timeout=None, limits=limits, headers={"Accept": "*/*"}
        ) as client:
            for default in (
                "Accept-Encoding",
                "Connection",
                "User-Agent",
            ):  # pg_net sends its own User-Agent only
                client.headers.pop(default, None)
            with psycopg.connect(self.url, autocommit=True, application_name=APPLICATION_NAME) as conn:
                self._connected.set()
                expired_at = 0.0
                while not self._stop.is_set():
                    if time.monotonic() - expired_at >= 1.0:
                        conn.execute(_EXPIRE, (self.ttl, self.batch_size))
                        expired_at = time.monotonic()
                    batch = conn.execute(_TAKE, (self.batch_size,)).fetchall()
                    if not batch:
                        self._stop.wait(self.poll_interval)
                        continue
                    rows = await asyncio.gather(*(self._send(client, request) for request in batch))
                    with conn.transaction(), conn.cursor() as cur:
                        cur.executemany(_INSERT, rows)

    async def _send(self, client: httpx.AsyncClient, row: tuple[Any, ...]) -> Row:
        request_id, method, url, timeout_ms, header_lines, body = row
        headers = [(k, v) for k, sep, v in (line.partition(": ") for line in header_lines) if sep]
        if body is not None and not any(k.lower() == "content-type" for k, _ in headers):
            headers.append(("Content-Type", "application/x-www-form-urlencoded"))  # as libcurl does
        headers.append(("User-Agent", f"pg_net/{PG_NET_VERSION}"))
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_ms / 1000 if timeout_ms > 0 else None):
                request = client.build_request(method.upper(), url, headers=headers, content=body)
                response = await client.send(request, stream=True)
                try:
                    raw = b"".join([chunk async for chunk in response.aiter_raw()])
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            ms = (time.monotonic() - started) * 1000
            msg = f"Timeout of {timeout_ms} ms reached. Total time: {ms:f} ms (DNS time: {0:f} ms, "
            msg += f"TCP/SSL handshake time: {0:f} ms, HTTP Request/Response time: {ms:f} ms)"
            return (request_id, None, None, None, None, True, msg)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error row, as in pg_net
            return (request_id, None, None, None, None, False, curl_error(exc))
        pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers.raw]
        content_type = next((v for k, v in pairs if k.lower() == "content-type"), None)
        content = raw.split(b"\0", 1)[0].decode("utf-8", "replace") or None  # a C string in pg_net
        return (request_id, response.status_code, content, Jsonb(dict(pairs)), content_type, False, None)


def curl_error(exc: BaseException) -> str:
    """libcurl's curl_easy_strerror() text for the usual failures of an httpx request."""
    if isinstance(exc, httpx.UnsupportedProtocol):
        return "Unsupported protocol"
    if isinstance(exc, httpx.TooManyRedirects):
        return "Number of redirects hit maximum amount"
    causes = [exc]  # httpx error <- httpcore error <- OSError / gaierror / SSLError
    while (cause := causes[-1].__cause__ or causes[-1].__context__) is not None and len(causes) < 10:
        causes.append(cause)
    if isinstance(exc, httpx.ConnectError):
        if any(isinstance(c, socket.gaierror) for c in causes):
            return "Couldn't resolve host name"
        if any(isinstance(c, ssl.SSLCertVerificationError) for c in causes):
            return "SSL peer certificate or SSH remote key was not OK"
        if any(isinstance(c, ssl.SSLError) for c in causes):
            return "SSL connect error"
        return "Couldn't connect to server"
    if isinstance(exc, httpx.RemoteProtocolError) and "without sending" in str(exc):
        return "Server returned nothing (no headers, no data)"
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        return "Failure when receiving data from the peer"
    if isinstance(exc, httpx.WriteError):
        return "Failure when sending data to the peer"
    return str(exc) or type(exc).__name__
