"""The worker and the dashboard served by a real uvicorn (jobkit.serving, the path both `serve`
commands take), talked to over raw sockets: slow request headers are cut off at the deadline,
a request the app takes long over is not, malformed HTTP writes few log lines, and hostile header
bytes (which the in-process TestClient cannot send) get a 4xx."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from jobkit.config import Settings
from jobkit.dashboard import Dashboard
from jobkit.handlers import Registry
from jobkit.logthrottle import BURST, Throttle
from jobkit.serving import bind, server
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.signing import HEADER

TIMEOUT = 1.0  # the header deadline these servers get
SECRET = "serving-secret-0123456789abcdef0123456789"


@contextmanager
def running(app: Any, **config: Any) -> Iterator[int]:
    """``app`` served in a thread on a free port (yielded) until the block ends."""
    sock = bind("127.0.0.1", 0)
    served = server(app, header_timeout=TIMEOUT, log_config=None, **config)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield sock.getsockname()[1]
    finally:
        served.should_exit = True
        thread.join(30)


@pytest.fixture
def worker_port(db_url: str) -> Iterator[int]:
    endpoint = WorkerEndpoint(Registry(), PostgresBackend(db_url), EndpointOptions(secret=SECRET))
    with running(endpoint.app, lifespan="on") as port:
        yield port


@pytest.fixture
def dashboard_port(db_url: str) -> Iterator[int]:
    dashboard = Dashboard(db_url, Settings(db_url=db_url))
    with running(dashboard.app, lifespan="off") as port:
        yield port
    dashboard.close()


def closed_after(conn: socket.socket, trickle: bytes, limit: float) -> float:
    """Send ``trickle`` a byte every 0.1 s (then nothing) until the server closes the connection;
    the seconds that took (inf when it did not within ``limit``)."""
    started = time.monotonic()
    conn.settimeout(0.1)
    sent = 0
    while time.monotonic() - started < limit:
        try:
            if sent < len(trickle):
                conn.sendall(trickle[sent:sent + 1])
                sent += 1
            if conn.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - started
    return float("inf")


SLOW = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000


@pytest.mark.parametrize("which", ["worker_port", "dashboard_port"])
def test_slow_request_headers_are_cut_off(request: pytest.FixtureRequest, which: str) -> None:
    """Found 7: nothing limited slow request headers (slowloris)."""
    port = request.getfixturevalue(which)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        took = closed_after(conn, SLOW, limit=TIMEOUT + 10)
    assert TIMEOUT * 0.8 <= took <= TIMEOUT + 5, took
    with socket.create_connection(("127.0.0.1", port)) as idle:  # connects and sends nothing
        assert closed_after(idle, b"", limit=TIMEOUT + 10) <= TIMEOUT + 5
    with socket.create_connection(("127.0.0.1", port)) as conn:  # a kept-alive connection's next request
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        conn.settimeout(10)
        assert conn.recv(65536).startswith(b"HTTP/1.1 ")
        assert closed_after(conn, SLOW, limit=TIMEOUT + 10) <= TIMEOUT + 5


def test_a_slow_response_is_not_cut_off() -> None:
    async def slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        import asyncio

        if scope["type"] != "http":
            return
        await asyncio.sleep(TIMEOUT * 2.5)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with running(slow_app, lifespan="off") as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        conn.settimeout(TIMEOUT * 10)
        answer = b""
        while not answer.endswith(b"ok"):
            chunk = conn.recv(65536)
            assert chunk, f"closed before the response: {answer!r}"
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")


def test_malformed_http_writes_few_log_lines(worker_port: int, caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("uvicorn.error")
    assert any(isinstance(f, Throttle) for f in logger.filters)  # server() installed it
    monkeypatch.setattr(logger, "filters", [Throttle()])
    caplog.set_level(logging.WARNING)
    for _ in range(100):
        with socket.create_connection(("127.0.0.1", worker_port)) as conn:
            conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            conn.settimeout(10)
            assert conn.recv(65536).startswith(b"HTTP/1.1 400")
    invalid = [r for r in caplog.records if "Invalid HTTP request" in r.getMessage()]
    assert 1 <= len(invalid) <= BURST


@pytest.mark.parametrize("value", [b"t=\xb2,v1=" + b"a" * 64, b"t=" + b"9" * 5000 + b",v1=" + b"a" * 64,
                                   b"t=1700000000,v1=" + b"\xe9" * 64])
def test_hostile_signature_bytes_over_the_wire_are_401(worker_port: int, value: bytes,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    body = json.dumps({"type": "echo"}).encode()
    with socket.create_connection(("127.0.0.1", worker_port)) as conn:
        conn.sendall(b"POST /run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + HEADER.encode() + b": " + value + b"\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        conn.settimeout(10)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_dashboard_command_cuts_off_slow_headers(db_url: str) -> None:
    """Found 7 through the real command (its default deadline, 10 s): `jobkit dashboard` in a
    process of its own, a client trickling one header byte at a time."""
    from jobkit.serving import HEADER_TIMEOUT

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "jobkit", "dashboard", "--port", str(port),
                                "--db-url", db_url], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert f"http://127.0.0.1:{port}/" in line, line
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port))
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the dashboard did not listen"
                time.sleep(0.1)
        with conn:
            took = closed_after(conn, SLOW, limit=HEADER_TIMEOUT + 10)
        assert HEADER_TIMEOUT * 0.8 <= took <= HEADER_TIMEOUT + 5, took
    finally:
        process.terminate()
        process.wait(30)
