"""`jobkit dev --demo`: the whole system, bounded and verified, on the local database.

The example handlers (jobs.py from `jobkit init`, or the packaged copy) run in an in-process
worker woken the way production wakes it: the insert trigger's NOTIFY for new jobs (pg_net on a
server that has it), and the built-in `wake` schedule's command for retries and snoozed jobs. On
Debian's pg_cron 1.4 that schedule runs once a minute, so the demo runs its command (and the
dead sweep's) every second itself, to finish in seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from ..config import Settings
from ..connector import Database
from ..cron.pg_cron import CronJobs
from ..cron.schedules import cron_command
from ..exceptions import JobkitError
from ..handlers import Registry
from ..jobs import Job, NewJob, Status
from ..lifecycle import Lifecycle
from ..worker.local import LocalWorker

Echo = Callable[[str], None]
DEMO_TYPES = ("demo.email", "demo.flaky", "demo.api", "demo.doomed")


@dataclass(frozen=True)
class Planned:
    label: str
    job: NewJob
    expect: Status
    attempts: int


@dataclass(frozen=True)
class Outcome:
    label: str
    job: Job
    expect: Status
    attempts: int

    @property
    def ok(self) -> bool:
        return self.job.status == self.expect and self.job.attempts == self.attempts


def planned() -> list[Planned]:
    emails = [
        Planned(
            f"email to user{i}",
            NewJob("demo.email", {"to": f"user{i}@example.com"}, priority=i % 3),
            Status.COMPLETED,
            1,
        )
        for i in range(5)
    ]
    calls = [
        Planned(
            f"API call #{n}" + (" (answered 429 once)" if n == 1 else ""),
            NewJob("demo.api", {"n": n, "first_call_429": n == 1}),
            Status.COMPLETED,
            1,
        )
        for n in range(1, 7)
    ]
    return [
        *emails,
        Planned("flaky upstream: fails once, retried", NewJob("demo.flaky", {}), Status.COMPLETED, 2),
        *calls,
        Planned(
            "bad recipient: retried, then dead", NewJob("demo.doomed", {"to": "nobody@"}), Status.DEAD, 2
        ),
    ]


def check_registry(registry: Registry) -> None:
    missing = [t for t in DEMO_TYPES if t not in registry]
    if missing:
        raise JobkitError(
            f"the handlers have no {missing[0]}: the demo needs the example handlers",
            hint="run it without --app, or in a folder where `jobkit init` wrote jobs.py",
        )


async def run_demo(
    db: Database, settings: Settings, registry: Registry, echo: Echo, *, timeout: float = 90.0
) -> list[Outcome]:
    """Start the worker, enqueue the demo jobs, tick until every one is finished, verify."""
    check_registry(registry)
    plan = planned()
    site = CronJobs(db, settings).site
    ticks = [cron_command(settings, site, "wake"), cron_command(settings, site, "sweep-dead")]
    async with LocalWorker(db, settings, registry, echo=echo) as worker:
        ids = await asyncio.to_thread(_enqueue, db, settings, plan)
        echo(f"enqueued {len(ids)} jobs; the insert trigger woke the worker over {worker.transport}")
        await _until_done(db, settings, ids, ticks, echo, timeout)
    with db.session() as session:
        manager = Lifecycle(session, settings.schema)
        return [
            Outcome(p.label, _get(manager, i), p.expect, p.attempts) for p, i in zip(plan, ids, strict=True)
        ]


def _enqueue(db: Database, settings: Settings, plan: list[Planned]) -> list[UUID]:
    with db.session() as session:
        return Lifecycle(session, settings.schema).enqueue_many([p.job for p in plan])


async def _until_done(
    db: Database, settings: Settings, ids: list[UUID], ticks: list[str], echo: Echo, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        counts = await asyncio.to_thread(_counts, db, settings, ids)
        line = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        if line != last:
            echo(f"  {line}")
            last = line
        if set(counts) <= {"completed", "dead"}:
            return
        if time.monotonic() > deadline:
            raise JobkitError(
                f"the demo's jobs did not finish within {timeout:.0f}s ({line})",
                hint="see `jobkit status` and `jobkit jobs list`",
            )
        await asyncio.sleep(1.0)
        await asyncio.to_thread(_tick, db, ticks)


def _tick(db: Database, commands: list[str]) -> None:
    """Run the `wake` and `sweep-dead` schedules' commands, as pg_cron would."""
    with db.session() as session:
        for command in commands:
            session.script(command)


def _counts(db: Database, settings: Settings, ids: list[UUID]) -> dict[str, int]:
    with db.session() as session:
        manager = Lifecycle(session, settings.schema)
        counts: dict[str, int] = {}
        for job_id in ids:
            status = _get(manager, job_id).status.value
            counts[status] = counts.get(status, 0) + 1
        return counts


def _get(manager: Lifecycle, job_id: UUID) -> Job:
    job = manager.get(job_id)
    if job is None:
        raise JobkitError(f"demo job {job_id} vanished")
    return job
