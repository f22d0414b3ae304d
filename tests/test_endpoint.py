"""The worker endpoint in-process (starlette's TestClient): auth, body validation, 202 + background
drain, the synchronous mode, health, the token read from the database."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from jobkit.backends.postgres import PostgresBackend
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.endpoint import WorkerEndpoint
from jobkit.handlers import Registry
from jobkit.manager import JobManager, NewJob
from jobkit.secrets import set_secrets
from starlette.testclient import TestClient

TOKEN = "endpoint-token-1234567890"
jobs = Registry()


@jobs.handler("echo")
async def echo(payload: Any, ctx: Any) -> Any:
    return payload


def _client(db_url: str, **options: Any) -> TestClient:
    endpoint = WorkerEndpoint(jobs, PostgresBackend(db_url), **options)
    return TestClient(endpoint.app)


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with _client(db_url, token=TOKEN) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-0000000000"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}])
def test_missing_or_wrong_token_is_401(client: TestClient, session: Session, headers: dict[str, str]) -> None:
    JobManager(session, "jobkit").enqueue(NewJob("echo", {}))
    response = client.post("/run", json={"type": "echo"}, headers=headers)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    time.sleep(0.2)
    assert session.scalar("select status from jobkit.jobs") == "pending"


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "must be JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"max_jobs": 5}', 422, "type must be a non-empty string"),
    (b'{"type": ""}', 422, "type must be a non-empty string"),
    (b'{"type": "echo", "max_jobs": 0}', 422, "max_jobs must be an integer"),
    (b'{"type": "echo", "max_jobs": "5"}', 422, "max_jobs must be an integer"),
    (b'{"type": "echo", "budget_ms": -1}', 422, "budget_ms must be an integer"),
    (b'{"type": "echo", "colour": "red"}', 422, "unknown field 'colour'"),
])
def test_bad_bodies_are_4xx(client: TestClient, body: bytes, status: int, message: str) -> None:
    response = client.post("/run", content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == status and message in response.json()["error"]


def test_accepts_at_once_and_drains_in_the_background(client: TestClient, session: Session) -> None:
    JobManager(session, "jobkit").enqueue_many([NewJob("echo", {"i": i}) for i in range(30)])
    response = client.post("/run", json={"type": "echo", "max_jobs": 100, "budget_ms": 5000}, headers=AUTH)
    assert response.status_code == 202
    body = response.json()
    assert body["accepted"] is True and body["type"] == "echo" and body["budget_ms"] == 5000
    deadline = time.monotonic() + 10
    while session.scalar("select count(*) from jobkit.jobs where status = 'completed'") < 30:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_sync_mode_answers_with_a_summary(db_url: str, session: Session) -> None:
    JobManager(session, "jobkit").enqueue_many([NewJob("echo", {"i": i}) for i in range(7)])
    with _client(db_url, token=TOKEN, mode="sync") as client:
        response = client.post("/run", json={"type": "echo"}, headers=AUTH)
    assert response.status_code == 200
    assert response.json() | {"type": "echo"} == {"type": "echo", "claimed": 7, "completed": 7, "failed": 0,
                                                  "snoozed": 0, "released": 0, "lost": 0}


def test_max_jobs_bounds_one_call(db_url: str, session: Session) -> None:
    JobManager(session, "jobkit").enqueue_many([NewJob("echo", {}) for _ in range(10)])
    with _client(db_url, token=TOKEN) as client:
        response = client.post("/run?wait=1", json={"type": "echo", "max_jobs": 4}, headers=AUTH)
    assert response.json()["completed"] == 4
    assert session.scalar("select count(*) from jobkit.jobs where status = 'pending'") == 6


def test_healthz(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body["ok"] is True and body["types"] == ["echo"] and body["worker"]


def test_token_comes_from_the_database_and_rotation_applies(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobkit.endpoint.TOKEN_REFRESH", 0.0)
    with _client(db_url) as client:
        assert client.post("/run", json={"type": "echo"}, headers=AUTH).status_code == 503
        settings = Settings(db_url=db_url)
        set_secrets(Database(db_url), settings, url="http://127.0.0.1:1/run", token=TOKEN)
        assert client.post("/run", json={"type": "echo"}, headers=AUTH).status_code == 202
        set_secrets(Database(db_url), settings, url=None, token=None, rotate=True)
        assert client.post("/run", json={"type": "echo"}, headers=AUTH).status_code == 401


def test_mountable_in_another_starlette_app(db_url: str, session: Session) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    endpoint = WorkerEndpoint(jobs, PostgresBackend(db_url), token=TOKEN, mode="sync")
    host = Starlette(routes=[Mount("/jobkit", app=endpoint.app)], lifespan=endpoint.lifespan)
    JobManager(session, "jobkit").enqueue(NewJob("echo", {"x": 1}))
    with TestClient(host) as client:
        response = client.post("/jobkit/run", json={"type": "echo"}, headers=AUTH)
    assert response.status_code == 200 and response.json()["completed"] == 1
