"""GET /metrics: prometheus_client's text format, counters that agree with the database after a drain,
a cached backlog, and no answer without the token (or, with none configured, off loopback)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from jobkit.connector import Session
from jobkit.handlers import Permanent, Registry, Retry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.metrics import allowed
from jobkit.worker.signing import signed_headers
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

SECRET = "metrics-secret-0123456789abcdef0123456789"
TOKEN = "scrape-token-0123456789"


def _registry() -> Registry:
    jobs = Registry()

    @jobs.handler("ok")
    async def ok(payload: Any, ctx: Any) -> Any:
        return payload

    @jobs.handler("doomed")
    async def doomed(payload: Any, ctx: Any) -> None:
        raise Permanent("no such mailbox")

    @jobs.handler("later")
    async def later(payload: Any, ctx: Any) -> None:
        raise Retry(after=timedelta(hours=1))

    return jobs


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    options = EndpointOptions(secret=SECRET, metrics_token=TOKEN, metrics_ttl=0.0)
    endpoint = WorkerEndpoint(_registry(), PostgresBackend(db_url), options)
    with TestClient(endpoint.app) as c:
        yield c


def _run(client: TestClient, job_type: str) -> None:
    raw = json.dumps({"type": job_type, "nonce": uuid.uuid4().hex}).encode()
    response = client.post("/run?wait=1", content=raw, headers=signed_headers(SECRET, raw))
    assert response.status_code == 200, response.text


def _scrape(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def test_counters_agree_with_the_database_after_a_drain(client: TestClient, manager: Lifecycle,
                                                        session: Session) -> None:
    manager.enqueue_many([NewJob("ok", {"i": i}) for i in range(20)]
                         + [NewJob("doomed", {}) for _ in range(3)] + [NewJob("later", {}) for _ in range(4)])
    manager.enqueue(NewJob("ok", {"future": True}, delay=timedelta(hours=1)))
    manager.enqueue_many([NewJob("idle", {}) for _ in range(5)])  # no handler drains these: backlog
    for job_type in ("ok", "doomed", "later"):
        _run(client, job_type)
    m = _scrape(client)
    db = {(r["type"], r["status"]): r["n"] for r in session.all(
        "select type, status, count(*) as n from jobkit.jobs group by 1, 2")}
    assert m[("jobkit_jobs_claimed_total", (("type", "ok"),))] == 20
    assert m[("jobkit_jobs_completed_total", (("type", "ok"),))] == db[("ok", "completed")] == 20
    assert m[("jobkit_jobs_failed_total", (("type", "doomed"),))] == db[("doomed", "failed")] == 3
    assert m[("jobkit_jobs_retried_total", (("type", "later"),))] == db[("later", "pending")] == 4
    assert m[("jobkit_handler_duration_seconds_count", (("type", "ok"),))] == 20
    assert m[("jobkit_claim_duration_seconds_count", ())] >= 3
    assert m[("jobkit_record_duration_seconds_count", ())] >= 3
    assert m[("jobkit_backlog_jobs", (("type", "idle"),))] == 5  # due now; the future ok job is not
    assert ("jobkit_backlog_jobs", (("type", "ok"),)) not in m
    assert m[("jobkit_oldest_due_seconds", (("type", "idle"),))] >= 0
    assert m[("jobkit_drains_in_flight", ())] == 0


def test_metrics_need_the_token(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert SECRET not in client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text


def test_without_a_token_only_loopback_scrapes() -> None:
    assert allowed(None, None, "127.0.0.1") and allowed(None, None, "::1")
    assert not allowed(None, None, "10.0.0.7") and not allowed(None, "Bearer x", "203.0.113.9")
    assert allowed("t0k", "Bearer t0k", "203.0.113.9") and not allowed("t0k", None, "127.0.0.1")
