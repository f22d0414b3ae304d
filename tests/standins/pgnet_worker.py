"""TEST STAND-IN for pg_net's background worker (supabase/pg_net 0.20.x) over tests/standins/pg_net.sql.

Timing follows pg_net 0.20.4's worker (src/worker.c) and measurements of it. net.http_get/http_post/
http_delete call net.wake(), which here is a NOTIFY on WAKE_CHANNEL: PostgreSQL delivers it at commit
only, not at all on rollback, and once per transaction. That plays pg_net's commit callback, which
sets the shared flag `should_wake` and the worker's latch. The worker loops like pg_net's:

    outer: if should_wake is not set, wait for a wake; otherwise clear it and run the inner loop
    inner: in one transaction: delete expired responses (at most batch_size), take up to batch_size
           requests (DELETE ... RETURNING, by id, SKIP LOCKED so that two stand-ins never take the
           same row), send them concurrently, wait for the whole batch, write one net._http_response
           row each, commit; then pause `pause` s (pg_net: a 1000 ms latch wait); repeat while the
           pass took requests or deleted expired responses

An isolated request after a quiet period is sent within milliseconds of its commit. Requests that
commit while a batch is in flight or during the pause wait for the pause to end: a burst gets what had
committed at the first wake sent at once and the rest about a second later; one slow endpoint holds
back its whole batch; rows INSERTed into the queue without net.wake() wait for some later wake.
Sending is as in pg_net: http/https, redirects followed, one total ``timeout_milliseconds`` budget
per request, libcurl's error texts in the response rows.

Fault mode (``drop_rate``, ``timeout_rate``, ``lose_rate``: fractions of the requests taken, drawn
from ``random.Random(seed)`` in id order): a dropped request never reaches the endpoint and gets an
error row "Couldn't connect to server"; a timed-out one reaches the endpoint, is held until its
timeout and gets pg_net's timeout row (timed_out true, no status), as a real timeout that still
reached the server; a lost one neither reaches the endpoint nor gets a response row, as requests
lost when a crash restart empties the unlogged queue. ``stats`` counts wakes, passes with requests
and the fate of every request taken (sent, dropped, timed_out, lost).

Remaining differences from pg_net:
- pg_net's source would let the first wake that arrives during a batch end the following pause early
  (it sets the latch); measured on 0.20.4, the pause holds (197 of a 200-request burst answered ~1 s
  after the first 3). The stand-in follows the measurements: a wake during a batch or a pause is
  remembered in should_wake but never shortens the pause.
- start() joins as a worker that has been running and is idle (should_wake clear): requests already
  queued and expired responses wait for the next wake. A real worker start (at boot, or after
  net.worker_restart(), which does nothing here) sets should_wake and makes a pass at once, followed
  by its pause.
- it is two client backends (one works, one LISTENs) named by application_name, not one
  'pg_net worker' background worker; it runs its batch in a client transaction (idle in transaction
  while sending).
- NOTIFY takes PostgreSQL's notify-queue lock at commit, which serialises the commits of
  transactions that called net.wake() (pg_net's wake is a lock-free flag), and a transaction that
  called it cannot be PREPAREd (pg_net's PREPAREd transactions just wake nothing).
- it sends with httpx, at roughly 1 ms of CPU per request where libcurl needs far less: a batch of
  200 reaches a loopback server some 0.2-0.3 s after the pass starts (a burst's later requests are
  answered ~1.3 s after commit, not pg_net's measured ~1.08 s). The timeout message does not split
  DNS/handshake/HTTP time, only common failures get libcurl's texts, a body that is not UTF-8 gets
  replacement characters, and timeouts <= 0 mean no timeout (as in libcurl).
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

SQL_FILE = Path(__file__).with_name("pg_net.sql")
PG_NET_VERSION = "0.20.4"
APPLICATION_NAME = f"pg_net {PG_NET_VERSION} worker (test stand-in)"
WAKE_CHANNEL = "pg_net_test_standin_wake"  # the channel net.wake() notifies in pg_net.sql
STOP_PAYLOAD = "stop"  # stop() wakes the stand-ins of its database with it: not a wake-up
STOP_CHECK = 0.25  # s: a wait also looks at the stop flag this often, should the stop NOTIFY fail

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
Fate = Literal["sent", "dropped", "timed_out", "lost"]


class PgNetStandIn:
    """Plays pg_net's background worker for one database, in a daemon thread."""

    def __init__(
        self,
        url: str,
        *,
        batch_size: int = 200,
        pause: float = 1.0,
        ttl: timedelta = timedelta(hours=6),
        drop_rate: float = 0.0,
        timeout_rate: float = 0.0,
        lose_rate: float = 0.0,
        seed: int | None = None,
    ) -> None:
        rates = (drop_rate, timeout_rate, lose_rate)
        if not all(0.0 <= rate <= 1.0 for rate in rates) or sum(rates) > 1.0:
            raise ValueError("drop_rate, timeout_rate and lose_rate are fractions that add up to 1 at most")
        self.url, self.batch_size, self.pause, self.ttl = url, batch_size, pause, ttl
        self.drop_rate, self.timeout_rate, self.lose_rate = rates
        self.error: BaseException | None = None  # what stopped the worker thread, if it crashed
        # Since construction: wake-ups taken (outer loop), passes that took requests, and the fate of
        # every request taken ("sent": sent as asked, whatever came back; the others: fault mode),
        # counted when taken, before its pass commits.
        self.stats = dict.fromkeys(("wakes", "batches", "sent", "dropped", "timed_out", "lost"), 0)
        self._random = random.Random(seed)
        self._should_wake = False  # pg_net's shared flag; the worker thread's own once started
        self._stop = threading.Event()
        self._connected = threading.Event()  # set once the worker's connections are open and listening
        self._thread: threading.Thread | None = None

    def install(self) -> None:
        """(Re)create the `net` schema from pg_net.sql: drops any existing stand-in and its queue."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(SQL_FILE.read_text())  # a trusted file

    def start(self) -> PgNetStandIn:
        """Start as a worker that has been running and is idle: see the module docstring."""
        if self.running:
            return self
        self._stop.clear()
        self._connected.clear()
        self._should_wake = False
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
            if self._thread.is_alive():
                self._notify_stop()
            self._thread.join(timeout)
            self._thread = None
            self._wait_gone(timeout)
        if self.error is not None:
            raise RuntimeError(f"the pg_net stand-in worker crashed: {self.error!r}") from self.error

    def _notify_stop(self) -> None:
        """End the worker's wait at once (it would see the stop flag within STOP_CHECK s anyway)."""
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("select pg_notify(%s, %s)", (WAKE_CHANNEL, STOP_PAYLOAD))
        except psycopg.Error:
            pass

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
        """pg_net's outer loop: wait for a wake, then run the inner loop."""
        async with _http_client() as client:
            with (
                psycopg.connect(self.url, autocommit=True, application_name=APPLICATION_NAME) as conn,
                psycopg.connect(self.url, autocommit=True, application_name=APPLICATION_NAME) as listener,
            ):
                listener.execute(sql.SQL("listen {}").format(sql.Identifier(WAKE_CHANNEL)))
                self._connected.set()
                while not self._stop.is_set():
                    if not self._should_wake:
                        self._wait(listener, None)
                        continue
                    self._should_wake = False
                    self.stats["wakes"] += 1
                    await self._drain(client, conn, listener)

    async def _drain(
        self, client: httpx.AsyncClient, conn: psycopg.Connection[Any], listener: psycopg.Connection[Any]
    ) -> None:
        """pg_net's inner loop: passes `pause` s apart while they take requests or expire responses."""
        while True:
            taken, expired = await self._pass(client, conn)
            self._wait(listener, self.pause)
            if self._stop.is_set() or (taken == 0 and expired == 0):
                return

    def _wait(self, listener: psycopg.Connection[Any], timeout: float | None) -> None:
        """pg_net's latch wait. Without a timeout: until a wake. With one: the whole pause; a wake that
        arrives meanwhile only sets should_wake (see the module docstring). stop() ends either."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop.is_set():
            remaining = STOP_CHECK if deadline is None else min(STOP_CHECK, deadline - time.monotonic())
            if remaining <= 0:
                return
            for notify in listener.notifies(timeout=remaining, stop_after=1):
                if notify.payload != STOP_PAYLOAD:
                    self._should_wake = True
            if deadline is None and self._should_wake:
                return

    async def _pass(self, client: httpx.AsyncClient, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """One transaction: delete expired responses, take a batch, send it, record the answers.
        Returns (requests taken, responses deleted)."""
        with conn.transaction():
            expired = conn.execute(_EXPIRE, (self.ttl, self.batch_size)).rowcount
            batch = sorted(conn.execute(_TAKE, (self.batch_size,)).fetchall())
            if batch:
                self.stats["batches"] += 1
                fates = [self._fate() for _ in batch]  # drawn in id order: reproducible with a seed
                rows = await asyncio.gather(*map(self._deliver, [client] * len(batch), batch, fates))
                answered = [row for row in rows if row is not None]
                if answered:
                    with conn.cursor() as cur:
                        cur.executemany(_INSERT, answered)
        return len(batch), expired

    def _fate(self) -> Fate:
        faults: tuple[tuple[Fate, float], ...] = (
            ("dropped", self.drop_rate),
            ("timed_out", self.timeout_rate),
            ("lost", self.lose_rate),
        )
        draw = self._random.random()
        for fate, rate in faults:
            if draw < rate:
                return fate
            draw -= rate
        return "sent"

    async def _deliver(self, client: httpx.AsyncClient, request: tuple[Any, ...], fate: Fate) -> Row | None:
        """The response row of one request as its fate has it (None: lost, no row)."""
        self.stats[fate] += 1
        if fate == "lost":
            return None
        if fate == "dropped":
            return (request[0], None, None, None, None, False, "Couldn't connect to server")
        return await self._send(client, request, hold=fate == "timed_out")

    async def _send(self, client: httpx.AsyncClient, row: tuple[Any, ...], *, hold: bool = False) -> Row:
        """Send one request; with `hold`, keep it in flight after its answer until its timeout."""
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
                if hold:  # fault mode: the deadline ends this wait (no deadline: time out at once)
                    if timeout_ms > 0:
                        await asyncio.Event().wait()
                    raise TimeoutError
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


def _http_client() -> httpx.AsyncClient:
    """No connection limits, no automatic timeout, and no default headers but Accept (pg_net sends
    its own User-Agent only)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    client = httpx.AsyncClient(follow_redirects=True, timeout=None, limits=limits, headers={"Accept": "*/*"})
    for default in ("Accept-Encoding", "Connection", "User-Agent"):
        client.headers.pop(default, None)
    return client


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
