"""`jobkit dev --demo`: the main job end to end on the local database, bounded and verified.

It enqueues a mix of jobs through the SQL API (priorities, an idempotent duplicate, one that fails
once, one that exhausts its attempts), drains them with batched claims and fenced batched
completions, dead-letters the exhausted one and checks every job reached its expected state.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from .connector import Database
from .exceptions import JobkitError
from .jobs import Job, Status
from .manager import Failure, JobManager, NewJob

Echo = Callable[[str], None]
WORKER = "jobkit-demo"


@dataclass(frozen=True)
class DemoJob:
    label: str
    job: NewJob
    expect: Status


@dataclass(frozen=True)
class Outcome:
    label: str
    job: Job
    expect: Status

    @property
    def ok(self) -> bool:
        return self.job.status == self.expect


def demo_jobs(run: str) -> list[DemoJob]:
    emails = [
        DemoJob(f"email #{i} (priority {i % 3})",
                NewJob("demo.email", {"to": f"user{i}@example.com"}, priority=i % 3),
                Status.COMPLETED)
        for i in range(1, 7)
    ]
    return [
        *emails,
        DemoJob("report (idempotency key)", NewJob("demo.report", {"month": "2026-11"},
                idempotency_key=f"{run}:report"), Status.COMPLETED),
        DemoJob("report again, same key", NewJob("demo.report", {"month": "2026-11"},
                idempotency_key=f"{run}:report"), Status.COMPLETED),
        DemoJob("flaky: fails once, retried", NewJob("demo.flaky", {"n": 1}), Status.COMPLETED),
        DemoJob("doomed: always fails", NewJob("demo.doomed", {"n": 1}, max_attempts=2), Status.DEAD),
    ]


def handle(job: Job) -> Any:
    """The demo's handlers: return a result or raise."""
    if job.type == "demo.flaky" and job.attempts == 1:
        raise RuntimeError("upstream timed out (first attempt only)")
    if job.type == "demo.doomed":
        raise RuntimeError(f"invalid recipient (attempt {job.attempts})")
    return {"attempt": job.attempts}


def run_demo(db: Database, schema: str, echo: Echo, *, timeout: float = 30.0) -> list[Outcome]:
    """Enqueue, drain, dead-letter; return each demo job's final state."""
    planned = demo_jobs(uuid.uuid4().hex[:8])
    with db.session() as session:
        manager = JobManager(session, schema)
        ids = manager.enqueue_many([p.job for p in planned])
        echo(f"enqueued {len(ids)} jobs ({len(set(ids))} distinct: one idempotent duplicate)")
        _drain(manager, set(ids), echo, timeout)
        echo(f"sweep_dead: {manager.sweep_dead()} job(s) dead-lettered")
        return [Outcome(p.label, _get(manager, i), p.expect) for p, i in zip(planned, ids, strict=True)]


def _drain(manager: JobManager, ids: set[UUID], echo: Echo, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    types = ["demo.email", "demo.report", "demo.flaky", "demo.doomed"]
    while not _finished(manager, ids):
        if time.monotonic() > deadline:
            raise JobkitError("the demo's jobs did not finish in time", hint="run `jobkit db status`")
        claimed = [job for t in types for job in manager.pick(t, 50, WORKER, timedelta(minutes=1))]
        if claimed:
            _process(manager, claimed, echo)
        else:
            time.sleep(0.2)


def _process(manager: JobManager, claimed: list[Job], echo: Echo) -> None:
    done, failed = [], []
    for job in claimed:
        try:
            done.append((job.id, job.attempts, handle(job)))
        except RuntimeError as exc:
            failed.append(Failure(job.id, job.attempts, str(exc), retry_in=timedelta(seconds=1)))
    accepted = manager.complete(done)
    statuses = manager.fail(failed)
    echo(f"claimed {len(claimed)}: completed {len(accepted)}, failed {len(statuses)} "
         f"({_describe(statuses)})")


def _describe(statuses: dict[UUID, str]) -> str:
    retry = sum(1 for s in statuses.values() if s == "pending")
    return f"{retry} retry in 1s, {len(statuses) - retry} out of attempts"


def _finished(manager: JobManager, ids: set[UUID]) -> bool:
    return all(_get(manager, i).status not in (Status.PENDING, Status.PROCESSING) for i in ids)


def _get(manager: JobManager, job_id: UUID) -> Job:
    job = manager.get(job_id)
    if job is None:
        raise JobkitError(f"demo job {job_id} vanished")
    return job
