"""The worker endpoint in-process (starlette's TestClient): signed wake-ups, body validation, 202 and
a background drain until the type is empty, due-time timers, the synchronous mode, health with the
database's state, keys read from the database and their rotation."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.secrets import set_secrets
from jobkit.worker.signing import HEADER, sign, signed_headers
from poll import wait_for
from starlette.testclient import TestClient

SECRET = "endpoint-secret-0123456789abcdef0123456789"
jobs = Registry()


@jobs.handler("echo")
async def echo(payload: Any, ctx: Any) -> Any:
    return payload


def _endpoint(db_url: str, **options: Any) -> WorkerEndpoint:
    return WorkerEndpoint(jobs, PostgresBackend(db_url), EndpointOptions(**options))


@pytest.fixture
def endpoint(db_url: str) -> WorkerEndpoint:
    return _endpoint(db_url, secret=SECRET)


@pytest.fixture
def client(endpoint: WorkerEndpoint) -> Iterator[TestClient]:
    with TestClient(endpoint.app) as c:
        yield c


def post(client: TestClient, body: dict[str, Any] | bytes, secret: str = SECRET, path: str = "/run",
         **sign_options: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps({"nonce": uuid.uuid4().hex, **body}).encode()
    return client.post(path, content=raw, headers=signed_headers(secret, raw, **sign_options))


def count(session: Session, status: str) -> int:
    return int(session.scalar("select count(*) from jobkit.jobs where status = %s", (status,)))


@pytest.mark.parametrize("how", ["no header", "wrong secret", "malformed", "expired", "from the future",
                                 "t of 5,000 digits", "t of superscript digits"])
def test_unsigned_or_badly_signed_calls_are_401(
    client: TestClient, endpoint: WorkerEndpoint, session: Session, how: str
) -> None:
    Lifecycle(session, "jobkit").enqueue(NewJob("echo", {}))
    raw = json.dumps({"type": "echo"}).encode()
    headers = {
        "no header": {},
        "wrong secret": signed_headers("another-secret-0123456789abcdef01234", raw),
        "malformed": {HEADER: "t=abc,v1=zz"},
        "expired": signed_headers(SECRET, raw, t=int(time.time()) - 120),
        "from the future": signed_headers(SECRET, raw, t=int(time.time()) + 120),
        "t of 5,000 digits": {HEADER: f"t={'9' * 5000},v1={'ab' * 32}"},  # Found 5: was a 500
        "t of superscript digits": {HEADER: f"t=\u00b2\u00b3,v1={'ab' * 32}".encode()},
    }[how]
    response = client.post("/run", content=raw, headers=headers)
    assert response.status_code == 401
    assert endpoint.dispatcher is not None and endpoint.dispatcher.draining == []
    assert count(session, "pending") == 1


def test_a_signed_request_is_used_once(client: TestClient, session: Session) -> None:
    raw = json.dumps({"type": "echo", "nonce": "n-1"}).encode()
    headers = signed_headers(SECRET, raw)
    assert client.post("/run", content=raw, headers=headers).status_code == 202
    replay = client.post("/run", content=raw, headers=headers)
    assert replay.status_code == 200 and replay.json() == {"accepted": False, "duplicate": True}


def test_a_signed_request_is_used_once_by_every_worker_process(db_url: str, session: Session) -> None:
    """Another endpoint (another process, or this one restarted) sees the request used: the
    database consumed it. The duplicate starts nothing."""
    raw = json.dumps({"type": "echo", "nonce": uuid.uuid4().hex}).encode()
    headers = signed_headers(SECRET, raw)
    with TestClient(_endpoint(db_url, secret=SECRET, linger=0.0).app) as first:
        assert first.post("/run", content=raw, headers=headers).status_code == 202
    other = _endpoint(db_url, secret=SECRET, linger=0.0)
    with TestClient(other.app) as second:
        wait_for(other.caught_up.is_set, 10, "the start-up catch-up finished", every=0.02)
        session.execute("alter table jobkit.jobs disable trigger jobs_wake_on_insert")
        Lifecycle(session, "jobkit").enqueue(NewJob("echo", {}))
        replay = second.post("/run", content=raw, headers=headers)
        assert replay.status_code == 200 and replay.json()["duplicate"] is True
        time.sleep(0.3)
        assert other.dispatcher is not None and other.dispatcher.draining == []
        assert count(session, "pending") == 1


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "must be JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, 413, "larger than"),
    (b"[" * 5_000 + b"]" * 5_000, 400, "must be JSON"),
    (b'{"max_jobs": 5}', 422, "type must be a non-empty string"),
    (b'{"type": ""}', 422, "type must be a non-empty string"),
    (b'{"type": "echo", "max_jobs": 0}', 422, "max_jobs must be an integer"),
    (b'{"type": "echo", "max_jobs": "5"}', 422, "max_jobs must be an integer"),
    (b'{"type": "echo", "budget_ms": -1}', 422, "budget_ms must be an integer"),
    (b'{"type": "echo", "at": "soon"}', 422, "at must be a Unix time"),
    (b'{"type": "echo", "colour": "red"}', 422, "unknown field 'colour'"),
])
def test_bad_bodies_are_4xx(client: TestClient, body: bytes, status: int, message: str) -> None:
    response = post(client, body)
    assert response.status_code == status and message in response.json()["error"]


def test_one_wake_up_drains_the_whole_backlog(client: TestClient, session: Session) -> None:
    """One wake-up, many more jobs than a claim takes: all of them run, not just one batch."""
    Lifecycle(session, "jobkit").enqueue_many([NewJob("echo", {"i": i}) for i in range(450)])
    response = post(client, {"type": "echo", "budget_ms": 5000})
    assert response.status_code == 202 and response.json()["accepted"] is True
    wait_for(lambda: count(session, "completed") == 450, 10, "450 jobs completed", every=0.02)


def test_a_due_time_sets_a_timer(client: TestClient, endpoint: WorkerEndpoint, session: Session) -> None:
    run_at = session.scalar("select now() + interval '1.5 seconds'")
    Lifecycle(session, "jobkit").enqueue(NewJob("echo", {}, run_at=run_at))
    at = run_at.timestamp()
    assert post(client, {"type": "echo", "at": at}).json()["at"] == at
    assert endpoint.dispatcher is not None and "echo" in endpoint.dispatcher.timers
    wait_for(lambda: count(session, "completed") == 1, 10, "the job completed", every=0.02)
    started = session.scalar("select started_at from jobkit.jobs")
    assert (started - run_at).total_seconds() < 1.0


def test_sync_mode_answers_with_a_summary(db_url: str, session: Session) -> None:
    endpoint = _endpoint(db_url, secret=SECRET, mode="sync", linger=0.0)
    with TestClient(endpoint.app) as client:
        # the start-up catch-up (nothing due yet) must have looked, or it could take the jobs
        wait_for(endpoint.caught_up.is_set, 10, "the start-up catch-up finished", every=0.02)
        Lifecycle(session, "jobkit").enqueue_many([NewJob("echo", {"i": i}) for i in range(7)])
        response = post(client, {"type": "echo"})
    assert response.status_code == 200
    assert response.json() | {"type": "echo"} == {"type": "echo", "claimed": 7, "completed": 7, "failed": 0,
                                                  "snoozed": 0, "waited": 0, "released": 0, "lost": 0, "cancelled": 0,
                                                  "ended": "empty"}


def test_max_jobs_bounds_one_call(client: TestClient, session: Session) -> None:
    Lifecycle(session, "jobkit").enqueue_many([NewJob("echo", {}) for _ in range(10)])
    response = post(client, {"type": "echo", "max_jobs": 4}, path="/run?wait=1")
    assert response.json()["completed"] == 4
    assert count(session, "pending") == 6


def test_healthz_reports_the_database(client: TestClient, db_url: str, admin: Session) -> None:
    body = client.get("/healthz").json()
    assert body["ok"] is True and body["database"] == "up" and body["types"] == ["echo"] and body["worker"]
    name = Database(db_url).dbname
    admin.execute(f'alter database "{name}" allow_connections false')
    try:
        admin.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        wait_for(lambda: client.get("/healthz").status_code == 503, 10, "/healthz answering 503", every=0.02)
        assert client.get("/healthz").json()["database"].startswith("unreachable")
    finally:
        admin.execute(f'alter database "{name}" allow_connections true')
    wait_for(lambda: client.get("/healthz").status_code == 200, 10, "/healthz answering 200", every=0.02)


def test_keys_come_from_the_database_and_rotations_cause_no_401(db_url: str) -> None:
    db, settings = Database(db_url), Settings(db_url=db_url)
    with TestClient(_endpoint(db_url).app) as client:
        assert post(client, {"type": "echo"}).status_code == 503  # no secret stored yet
        set_secrets(db, settings, url="http://127.0.0.1:1/run")
        with db.session() as s:
            first = s.scalar("select jobkit.secret('worker_secret')")
        assert post(client, {"type": "echo"}, secret=first).status_code == 202
        set_secrets(db, settings, url=None, rotate=True)
        with db.session() as s:
            second = s.scalar("select jobkit.secret('worker_secret')")
        assert second != first
        assert post(client, {"type": "echo"}, secret=second).status_code == 202  # re-read at once
        assert post(client, {"type": "echo"}, secret=first).status_code == 202  # grace period
    with db.session() as s:  # the grace period is over: a worker reading the keys now refuses it
        s.execute("update jobkit.settings set value = to_jsonb(now()) where key = 'secret_previous_until'")
    with TestClient(_endpoint(db_url).app) as client:
        assert post(client, {"type": "echo"}, secret=first).status_code == 401
        assert post(client, {"type": "echo"}, secret=second).status_code == 202


def test_mountable_in_another_starlette_app(db_url: str, session: Session) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    endpoint = _endpoint(db_url, secret=SECRET, mode="sync")
    host = Starlette(routes=[Mount("/jobkit", app=endpoint.app)], lifespan=endpoint.lifespan)
    with TestClient(host) as client:
        # the start-up catch-up would otherwise race /run for the job
        wait_for(endpoint.caught_up.is_set, 10, "the start-up catch-up finished", every=0.02)
        Lifecycle(session, "jobkit").enqueue(NewJob("echo", {"x": 1}))
        response = post(client, {"type": "echo"}, path="/jobkit/run")
    assert response.status_code == 200 and response.json()["completed"] == 1


def test_signature_is_hmac_sha256_over_timestamp_and_body() -> None:
    import hashlib
    import hmac

    header = sign("k" * 32, b'{"a":1}', t=1700000000)
    expected = hmac.new(b"k" * 32, b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


# ---- issue 21: refusals in the log, hostile headers and bodies, a busy port -----------------------

def test_refused_wake_ups_write_few_log_lines(client: TestClient, caplog: pytest.LogCaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Found 7: every refused /run wrote a WARNING (about 1,000 lines a second from anyone)."""
    from jobkit.logthrottle import BURST, Throttle

    logger = logging.getLogger("jobkit.worker.refused")
    assert any(isinstance(f, Throttle) for f in logger.filters)
    monkeypatch.setattr(logger, "filters", [Throttle()])  # not what earlier tests used up
    caplog.set_level(logging.WARNING, logger="jobkit")
    raw = json.dumps({"type": "echo"}).encode()
    for i in range(300):
        header = {HEADER: "t=abc,v1=zz"} if i % 2 else signed_headers("another-secret-0123456789abcdef01234", raw)
        assert client.post("/run", content=raw, headers=header).status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("jobkit.worker")]
    assert 1 <= len(lines) <= BURST and all(line.startswith("refused /run") for line in lines), lines


@pytest.mark.parametrize("header", ["t=" + "1" * 5_000 + ",v1=" + "a" * 64, "t=²,v1=" + "a" * 64,
                                    "t=1700000000,v1=" + "é" * 64, "x" * 100_000])
def test_hostile_signature_headers_are_401(client: TestClient, header: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    raw = json.dumps({"type": "echo"}).encode()
    response = client.post("/run", content=raw, headers={HEADER: header.encode("latin-1", "replace")})
    assert response.status_code == 401 and "malformed" in response.json()["error"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_large_body_is_refused_without_reading_it(client: TestClient) -> None:
    import asyncio

    from jobkit.serving import read_body
    from jobkit.worker.endpoint import MAX_BODY
    from starlette.requests import Request

    received: list[int] = []

    async def receive() -> dict[str, Any]:  # no Content-Length (chunked): 4 KB at a time, 4 MB in all
        received.append(1)
        return {"type": "http.request", "body": b" " * 4096, "more_body": len(received) < 1000}

    request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    assert asyncio.run(read_body(request, MAX_BODY)) is None
    assert len(received) * 4096 <= MAX_BODY + 4096  # stopped reading at the limit
    chunked = client.post("/run", content=iter([b" " * 4096] * 100), headers={HEADER: "t=1,v1=" + "a" * 64})
    assert chunked.status_code == 413 and "larger than" in chunked.json()["error"]
    declared = client.post("/run", content=b"{}", headers={"content-length": str(10**9)})
    assert declared.status_code == 413


def test_worker_on_a_busy_port_is_one_line_and_exit_1(db_url: str) -> None:
    """Found 16 (the worker's side): a busy port surfaced as uvicorn's log line and exit 3, after
    the worker had connected; now it is refused before anything starts."""
    import socket

    from click.testing import CliRunner
    from jobkit.cli import cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(cli, ["worker", "serve", "e2e_handlers:jobs", "--port", str(port),
                                          "--db-url", db_url])
    assert result.exit_code == 1, result.output
    assert f"port {port} on 127.0.0.1 is already in use" in result.output and "hint:" in result.output
    assert "Traceback" not in result.output
