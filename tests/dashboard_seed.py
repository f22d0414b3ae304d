"""Jobs in every state for the dashboard's tests, made through jobkit's own lifecycle (enqueue,
claim, complete, fail, snooze, cancel, sweep_dead), so the history is what real workers leave."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.ratelimits import set_limit

TYPES = ("send_email", "resize_image", "sync_crm")
TRACEBACK = ('Traceback (most recent call last):\n  File "app/jobs.py", line 42, in send_email\n'
             '    smtp.send(message)\nConnectionRefusedError: [Errno 111] Connection refused')


@dataclass
class Seeded:
    ids: dict[str, list[UUID]] = field(default_factory=dict)  # status -> ids

    def count(self, status: str) -> int:
        return len(self.ids.get(status, []))


def schedule_built_ins(url: str) -> None:
    """The built-in pg_cron schedules, as a deploy makes them, on a database copied from the session's
    template (deployed without schedules: pg_cron's jobs name their database, a copy has none)."""
    from jobkit.cron import schedules as scheduling

    scheduling.sync(Database(url), Settings(db_url=url))


def hold_state_changing_schedules(url: str) -> None:
    """Pause the schedules that move jobs between states on their own (sweep-dead turns failed jobs
    dead, prune deletes): a tick during a test would change the counts it checks. They stay listed
    (paused) on the schedules page."""
    from jobkit.cron.pg_cron import CronJobs

    cron = CronJobs(Database(url), Settings(db_url=url))
    for job in cron.list():
        if job.name in ("sweep-dead", "prune"):
            cron.set_active(job, False)


def seed(url: str, per_state: int = 100) -> Seeded:
    """``per_state`` jobs per type in each of pending, scheduled (pending later), processing,
    completed, failed, dead and cancelled, plus snoozed attempts and a rate limit."""
    seeded = Seeded()
    db = Database(url)
    with db.session() as s:
        life = Lifecycle(s)
        batches = {t: _enqueue_all(life, t, per_state, seeded, n * 10_000) for n, t in enumerate(TYPES)}
        for t in TYPES:  # claims take the oldest first: the batches in the order they were made
            life.complete([(i, a, json.dumps({"sent": True, "attempt": a})) for i, a in _claim(life, t, per_state)])
        for t in TYPES:
            life.fail([Failure(i, a, TRACEBACK, permanent=True) for i, a in _claim(life, t, per_state)])
        life.sweep_dead()  # every failed job so far is dead
        for t in TYPES:
            life.fail([Failure(i, a, TRACEBACK, permanent=True) for i, a in _claim(life, t, per_state)])
        for t in TYPES:
            running = _claim(life, t, per_state)
            for job_id, attempt in running[:2]:  # a rate limit put these two back (pending again)
                life.snooze(job_id, attempt, timedelta(0))
            for job_id in batches[t]["cancelled"]:
                life.cancel(job_id)
    set_limit(db, Settings(db_url=url), "smtp", "50/s", 100)
    with db.session() as s:
        s.execute("update jobkit.job_types set rate_limit = 'smtp' where type = 'send_email'")
    return seeded


STATES = ("completed", "dead", "failed", "processing", "cancelled", "pending", "scheduled")


def _enqueue_all(life: Lifecycle, job_type: str, n: int, seeded: Seeded,
                 user_base: int) -> dict[str, list[UUID]]:
    made: dict[str, list[UUID]] = {}
    for state in STATES:
        delay = timedelta(hours=1) if state == "scheduled" else None
        made[state] = life.enqueue_many([
            NewJob(job_type, {"user_id": user_base + i, "state": state, "to": f"user{i}@example.org"},
                   delay=delay)
            for i in range(n)])
        seeded.ids.setdefault(state, []).extend(made[state])
    return made


def _claim(life: Lifecycle, job_type: str, count: int) -> list[tuple[UUID, int]]:
    return [(c.id, c.attempts) for c in life.claim(job_type, count, "worker-1", timedelta(minutes=5))]
