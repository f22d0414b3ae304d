"""Helpers for your own test suites.

**Inline**, no database and no worker process: :class:`InlineQueue` runs your Registry's handlers
through the real worker code (the Drainer: retries with backoff, ``Retry``, ``RateLimited``,
``Permanent``, timeouts, typed payloads, ``max_attempts``) over the in-memory backend, on a clock
of its own that jumps over backoff, delays and sleeps (``ctx.sleep("3d")``, a wait's timeout), so a
job that fails twice and then succeeds, or a workflow that sleeps three days, takes milliseconds
(``queue.emit(...)`` sends the events its handlers wait for)::

    queue = InlineQueue(jobs)
    job_id = queue.enqueue("send_email", {"to": "a@example.com"})
    queue.run()                                     # until nothing is pending
    assert queue.result(job_id).status == "completed"
    assert jobs.run_inline("send_email", {"to": "x"}).result == {...}   # one job, the same way

**A real database**: :func:`deployed_database` creates a database on a PostgreSQL server with
pg_cron (``jobkit db start`` gives you one), deploys jobkit into it without schedules, yields its
URL and drops it afterwards (docs/guides/testing.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from .config import EventConfig, RateLimitConfig, Settings, TypeConfig
from .connector import Database
from .enqueue import check_job
from .exceptions import JobkitError, NotFound
from .flows import Flow, gather_graph
from .jobs import Attempt, FlowRun, JobResult, NewJob
from .worker.backends.memory import DEFAULTS, MemoryBackend
from .worker.drain import Drainer
from .worker.handler import Handlers


class Clock:
    """Wall time plus how far the queue has jumped ahead (over backoff, snoozes and delays)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


class InlineQueue:
    """Jobs in memory, run by the real Drainer in this process; see the module docstring."""

    def __init__(self, registry: Handlers, *, defaults: TypeConfig = DEFAULTS,
                 types: Mapping[str, TypeConfig] | None = None,
                 ratelimits: Mapping[str, RateLimitConfig] | None = None, concurrency: int = 4,
                 seed: int | None = 0, events: Mapping[str, EventConfig] | None = None) -> None:
        self.registry = registry
        self.clock = Clock()
        self.backend = MemoryBackend(defaults=defaults, types=types, ratelimits=ratelimits, clock=self.clock,
                                     seed=seed, events=events)
        self.concurrency = concurrency

    def enqueue(self, job_type: str, payload: Any, *, priority: int = 0, run_at: datetime | None = None,
                delay: timedelta | float | None = None, max_attempts: int | None = None,
                idempotency_key: str | None = None) -> UUID:
        """Like :func:`jobkit.enqueue` (pydantic models included), into memory."""
        wait = delay if delay is None or isinstance(delay, timedelta) else timedelta(seconds=float(delay))
        job = check_job(NewJob(job_type, payload, priority, run_at, max_attempts, idempotency_key, wait))
        return asyncio.run(self.backend.enqueue(job))

    def flow(self, graph: Flow) -> FlowRun:
        """Like :func:`jobkit.flow`, into memory: children blocked until their parents end."""
        return self.backend.flow(graph)

    def gather(self, jobs: Sequence[NewJob], then: NewJob, *, name: str | None = None) -> FlowRun:
        """Like :func:`jobkit.gather`, into memory: ``then`` runs once every job ended."""
        return self.backend.flow(gather_graph(jobs, then, name))

    def run(self, *, max_rounds: int = 10_000) -> int:
        """Drain every type until no job is pending and no sleep or wait timeout is left to pass,
        jumping the clock to each next due time (so backoff, delays, sleeps and timeouts cost no
        waiting). A job waiting for an event without a timeout stays 'waiting': ``emit`` it, then
        ``run`` again. Returns how many attempts ran."""
        return asyncio.run(self._run(max_rounds))

    def emit(self, name: str, key: str | int | None = None, data: Any = None, *,
             id: str | None = None) -> int:  # noqa: A002 - the emit's own id
        """Like :func:`jobkit.emit`, into memory: the waits for it are resumed (``run`` runs them)."""
        from .events import check_event

        text_key, checked = check_event(name, key, data, id)
        return asyncio.run(self.backend.emit(name, text_key, data, checked))

    def result(self, job_id: UUID) -> JobResult:
        """The job's state: status, result, last error, attempts, progress."""
        state = asyncio.run(self.backend.state(job_id))
        if state is None:
            raise NotFound(f"no job {job_id} in this queue")
        return state

    def history(self, job_id: UUID) -> list[Attempt]:
        """Every attempt of the job (retries, failures, snoozes and the completing one)."""
        return self.backend.history(job_id)

    async def _run(self, max_rounds: int) -> int:
        drainer = Drainer(self.registry, self.backend, concurrency=self.concurrency)
        ran = 0
        try:
            for _ in range(max_rounds):
                pending = await self.backend.due_types()
                if not pending:
                    dues = [w.due for w in self.backend.waits.open.values() if w.due is not None]
                    if not dues:
                        return ran
                    self._jump([min(dues) - self.clock()])  # over a sleep or a wait's timeout
                    continue
                claimed = 0
                for job_type in pending:
                    claimed += (await drainer.drain(job_type)).claimed
                ran += claimed
                if not claimed:
                    self._jump([await self.backend.next_due(t) for t in pending])
            raise JobkitError(f"jobs were still pending after {max_rounds} rounds",
                              hint="a handler keeps snoozing or retrying: look at queue.history(job_id)")
        finally:
            await drainer.shutdown(timedelta(seconds=1))

    def _jump(self, due_in: list[float | None]) -> None:
        ahead = min((d for d in due_in if d is not None), default=0.0)
        self.clock.ahead += max(ahead, 0.0) + 0.001


def run_inline(registry: Handlers, job_type: str, payload: Any, **options: Any) -> JobResult:
    """Run one job through ``registry``'s handler inline (retries included); its final state."""
    queue = InlineQueue(registry)
    job_id = queue.enqueue(job_type, payload, **options)
    queue.run()
    return queue.result(job_id)


@contextmanager
def deployed_database(server_url: str, *, settings: Settings | None = None) -> Iterator[str]:
    """A fresh database on the server of ``server_url`` (a superuser's URL; the server needs pg_cron
    in shared_preload_libraries), jobkit deployed into it without schedules; yields its URL and
    drops it afterwards. What it yields is a libpq connection string (every jobkit call takes it)."""
    from .schema.deploy import DeployOptions, deploy

    server = Database(server_url)
    name = f"jobkit_test_{uuid.uuid4().hex[:12]}"
    with server.session() as admin:
        admin.execute_with_identifiers("create database {name}", name=name)
    url = server.with_dbname(name).url
    try:
        chosen = Settings(**{**(settings or Settings()).__dict__, "db_url": url})
        deploy(Database(url), chosen, DeployOptions(schedules=False), echo=lambda _m: None)
        yield url
    finally:
        with server.session() as admin:
            admin.execute_with_identifiers("drop database if exists {name} with (force)", name=name)
