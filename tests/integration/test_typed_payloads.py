"""Typed payloads end to end on the real database: enqueue a pydantic model, the handler receives the
validated instance; a payload that does not validate is failed permanently (one attempt, never
retried) with the validation error, and wait() raises it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jobkit
import pytest
from jobkit.exceptions import ConfigError
from jobkit.jobs import NewJob, Status
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from opened import with_backend
from pydantic import BaseModel, Field


class SendEmail(BaseModel):
    to: str = Field(pattern=r"^[^@]+@[^@]+$")
    subject: str
    retries_left: int = 3


def _registry(seen: list[Any]) -> jobkit.Registry:
    jobs = jobkit.Registry()

    @jobs.handler("send_email", payload=SendEmail, max_attempts=5)
    async def send_email(payload: SendEmail, ctx: Any) -> dict[str, Any]:
        seen.append(payload)
        return {"sent_to": payload.to}

    @jobs.handler("send_email_sync", payload=SendEmail, max_attempts=5)
    def send_email_sync(payload: SendEmail, ctx: Any) -> str:
        seen.append(payload)
        return payload.subject

    return jobs


def test_a_typed_handler_end_to_end_and_a_bad_payload_failed_permanently(
        db_url: str, manager: Lifecycle) -> None:
    seen: list[Any] = []
    good = jobkit.enqueue(db_url, "send_email", SendEmail(to="a@example.com", subject="hi"))
    [good_sync, bad, worse] = jobkit.enqueue_many(db_url, [
        NewJob("send_email_sync", SendEmail(to="b@example.com", subject="sync")),
        NewJob("send_email", {"to": "not-an-address", "subject": "x"}),
        NewJob("send_email_sync", {"subject": 42}),
    ])
    stored = manager.get(good)
    assert stored is not None and stored.payload == {"to": "a@example.com", "subject": "hi", "retries_left": 3}

    async def body(backend: PostgresBackend) -> None:
        drainer = Drainer(_registry(seen), backend)
        try:
            await drainer.drain("send_email")
            await drainer.drain("send_email_sync")
        finally:
            await drainer.shutdown(timedelta(seconds=1))

    with_backend(PostgresBackend(db_url), body)
    assert [type(p) for p in seen] == [SendEmail, SendEmail]
    assert {p.to for p in seen} == {"a@example.com", "b@example.com"}
    assert jobkit.wait(db_url, good, timeout=1).result == {"sent_to": "a@example.com"}
    assert jobkit.wait(db_url, good_sync, timeout=1).result == "sync"
    for job_id, field in ((bad, "to"), (worse, "to")):
        job = manager.get(job_id)
        assert job is not None and (job.status, job.attempts) == (Status.FAILED, 1)  # never retried
        assert "invalid payload for send_email" in (job.last_error or "")
        assert "(SendEmail): " in (job.last_error or "") and f"{field}: " in (job.last_error or "")
        with pytest.raises(jobkit.JobFailed, match=r"invalid payload for send_email(_sync)? \(SendEmail\)"):
            jobkit.wait(db_url, job_id, timeout=1)


def test_payload_must_be_a_model_class() -> None:
    jobs = jobkit.Registry()
    with pytest.raises(ConfigError, match="pydantic model"):
        jobs.handler("x", payload=dict)
