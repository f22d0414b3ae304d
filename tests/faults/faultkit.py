"""Helpers of the fault suite (tests/faults): real worker processes, a restartable PostgreSQL, the pg_net stand-in, and a
ticker standing in for pg_cron's built-in schedules.

Each case enqueues jobs whose handler records a side effect per run, injects one fault, and then
checks with `exactly_once` that every job completed exactly once in the database, reporting how
many ran more than once (an attempt cut off by a crash runs again: at-least-once execution,
exactly-once completion). Every case is bounded in time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from fault_handlers import QUICK
from jobkit.config import Settings, TypeConfig
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.secrets import set_secrets
from standins import PgNetStandIn
from workers import SECRET

HERE = Path(__file__).parent
APP = "fault_handlers:jobs"


#: The fault handlers' types retry after a second, expired leases included (the sweep uses these).
FAULT_TYPES = {name: TypeConfig(max_attempts={"fault.work": 3, "fault.steps": 5}.get(name, 2), backoff=QUICK)
               for name in ("fault.work", "fault.crash", "fault.steps")}


def prepare(url: str, **settings: Any) -> Settings:
    """Deploy jobkit (no pg_cron schedules: the Ticker plays them) and the side-effect table."""
    config = Settings(db_url=url, types=FAULT_TYPES, **settings)
    deploy(Database(url), config, DeployOptions(schedules=False), echo=lambda _m: None)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table if not exists side_effects (job_id uuid not null, attempt int not null,"
                     " pid int not null, at timestamptz not null default clock_timestamp())")
        conn.execute("grant all on side_effects to public")
        conn.execute("create table if not exists step_effects (job_id uuid not null, step text not null,"
                     " attempt int not null, pid int not null)")
    return config


class Ticker:
    """Runs the built-in schedules' work (sweep-stuck, wake; either can be left out) every
    ``period`` seconds, as pg_cron does every minute: Debian's pg_cron 1.4 has no seconds
    schedules, and a fault case must not wait a minute per tick. Survives a server restart."""

    def __init__(self, url: str, period: float = 1.0, *, wake: bool = True, sweep: bool = True) -> None:
        self.url, self.period, self.wake, self.sweep = url, period, wake, sweep
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cron ticker", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
                    if self.sweep:
                        conn.execute("select count(*) from jobkit.sweep_stuck()")
                    if self.wake:
                        conn.execute("select jobkit.wake_all()")
                self.ticks += 1
            except psycopg.Error:
                continue  # the server is down or restarting: pg_cron would skip this tick too


@dataclass
class Verdict:
    jobs: int
    completed: int
    statuses: dict[str, int]
    runs: dict[UUID, int] = field(default_factory=dict)  # side effects per job

    @property
    def rerun(self) -> list[UUID]:
        return [job for job, n in self.runs.items() if n > 1]

    def report(self, case: str) -> str:
        extra = sum(n - 1 for n in self.runs.values() if n > 1)
        line = (f"[faults] {case}: {self.completed}/{self.jobs} completed exactly once; "
                f"{len(self.rerun)} job(s) ran more than once ({extra} re-execution(s)); statuses {self.statuses}")
        print(line)
        return line


def exactly_once(url: str, ids: list[UUID]) -> Verdict:
    """Every job completed exactly once (one completing attempt, no other state), with its side effects."""
    with psycopg.connect(url, autocommit=True) as conn:
        statuses = dict(conn.execute(
            "select status, count(*) from jobkit.jobs where id = any(%s) group by 1", (ids,)).fetchall())
        completions = dict(conn.execute(
            "select job_id, count(*) from jobkit.job_history where outcome = 'completed' and job_id = any(%s)"
            " group by 1", (ids,)).fetchall())
        runs = dict(conn.execute(
            "select job_id, count(*) from side_effects where job_id = any(%s) group by 1", (ids,)).fetchall())
    completed = sum(1 for n in completions.values() if n == 1)
    assert all(n == 1 for n in completions.values()), "a job completed twice"
    return Verdict(len(ids), completed, statuses, runs)


def count(url: str, where: str, params: Any = None) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(f"select count(*) from jobkit.jobs where {where}", params).fetchone()
        return int(row[0]) if row else 0


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def enqueue(url: str, n: int, job_type: str = "fault.work", **payload: Any) -> list[UUID]:
    with Database(url).session() as session:
        return Lifecycle(session, "jobkit").enqueue_many([NewJob(job_type, dict(payload)) for _ in range(n)])


def wire_pg_net(url: str, worker_url: str) -> Settings:
    """The pg_net stand-in's schema, jobkit deployed over it, the worker's URL and secret stored."""
    PgNetStandIn(url).install()
    settings = prepare(url)
    set_secrets(Database(url), settings, url=worker_url + "/run", secret=SECRET)
    return settings
