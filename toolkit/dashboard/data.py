"""What each dashboard page shows, read through the named queries of sql/queries/dashboard.sql.

Plain functions over a Session: no HTTP here, so the pages, the tests and the benchmark of the page
queries (bench/dashboard.py) all read the same data the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from croniter import croniter

from ..config import Settings
from ..connector import Database, Session
from ..cron.pg_cron import CronJobs
from ..cron.schedules import ScheduleRow
from ..cron.schedules import rows as schedule_rows
from ..jobs import Attempt, Job
from ..lifecycle import Lifecycle
from ..queries import queries
from .filters import JobFilter

PAGE_SIZE = 50
#: A schedule is late when its last run is older than its previous due time by more than this.
LATE_GRACE = timedelta(seconds=90)


@dataclass
class TypeRow:
    type: str
    due: int = 0
    scheduled: int = 0
    processing: int = 0
    failed: int = 0
    dead: int = 0
    completed_1h: int = 0
    cancelled_1h: int = 0
    failed_attempts_1h: int = 0
    snoozed_1h: int = 0
    oldest_due_s: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None

    @property
    def failure_rate(self) -> float | None:
        tried = self.completed_1h + self.failed_attempts_1h
        return self.failed_attempts_1h / tried if tried else None


@dataclass
class Overview:
    types: list[TypeRow] = field(default_factory=list)
    wakeups: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> outcome -> count
    paused: dict[str, list[str | None]] = field(default_factory=dict)  # type -> paused keys (None: all)


def overview(session: Session, schema: str) -> Overview:
    q = queries(schema)
    rows: dict[str, TypeRow] = {}

    def merge(query: str) -> None:
        for r in session.all(q[query]):
            row = rows.setdefault(r["type"], TypeRow(r["type"]))
            for key, value in r.items():
                if key == "durations":
                    row.p50, row.p95, row.p99 = value if value else (None, None, None)
                elif key != "type":
                    setattr(row, key, value)

    for name in ("dash_pending", "dash_processing", "dash_stopped", "dash_finished_recent",
                 "dash_attempts_recent", "dash_durations"):
        merge(name)
    wakeups: dict[str, dict[str, int]] = {}
    for r in session.all(q["dash_wakeups"]):
        wakeups.setdefault(r["type"], {})[r["outcome"]] = int(r["n"])
    paused: dict[str, list[str | None]] = {}
    for r in session.all(q["pauses_all"]):
        paused.setdefault(r["type"], []).append(r["key"])
        rows.setdefault(r["type"], TypeRow(r["type"]))
    return Overview(types=sorted(rows.values(), key=lambda t: t.type), wakeups=wakeups, paused=paused)


@dataclass
class Series:
    """Per-minute counts over a window, every minute present (zeros included), for a chart."""

    minutes: list[int]
    completed: list[int]
    failed: list[int]


def series(session: Session, schema: str, window: timedelta, job_type: str | None) -> Series:
    q = queries(schema)
    params = {"window": window, "type": job_type}
    done = {int(r["minute"]): int(r["n"]) for r in session.all(q["dash_throughput"], params)}
    failed = {int(r["minute"]): int(r["n"]) for r in session.all(q["dash_failures"], params)}
    now = int(datetime.now(UTC).timestamp()) // 60 * 60
    minutes = list(range(now - int(window.total_seconds()) + 60, now + 60, 60))
    return Series(minutes, [done.get(m, 0) for m in minutes], [failed.get(m, 0) for m in minutes])


@dataclass
class JobsPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None  # "created_at|id" of the last row when another page may follow


def jobs_page(session: Session, schema: str, flt: JobFilter, cursor: str | None,
              limit: int = PAGE_SIZE) -> JobsPage:
    before_at, before_id = _cursor(cursor)
    params = flt.params() | {"before_at": before_at, "before_id": before_id, "limit": limit}
    rows = session.all(queries(schema)["dash_jobs_page"], params)
    last = rows[-1] if len(rows) == limit else None
    return JobsPage(rows, f"{last['created_at'].isoformat()}|{last['id']}" if last else None)


def _cursor(cursor: str | None) -> tuple[datetime | None, UUID | None]:
    if not cursor:
        return None, None
    try:
        at, _, ident = cursor.partition("|")
        return datetime.fromisoformat(at), UUID(ident)
    except ValueError:
        return None, None  # a mangled cursor starts from the newest page


def payload_indexed(session: Session, schema: str) -> bool:
    """Whether payload search has its GIN index ([dashboard] payload_index = true)."""
    row = session.one(queries(schema)["payload_index_state"])
    return bool(row and row["valid"])


def job_detail(session: Session, schema: str, job_id: UUID) -> tuple[Job, list[Attempt]] | None:
    manager = Lifecycle(session, schema)
    job = manager.get(job_id)
    return None if job is None else (job, manager.history(job_id))


def job_types(session: Session, schema: str) -> list[str]:
    return [r["type"] for r in session.all(queries(schema)["dash_types"])]


@dataclass
class ScheduleView:
    row: ScheduleRow
    runs: list[dict[str, Any]]
    late: bool  # active, and its last run is older than its previous due time (plus a grace)


def schedules(db: Database, settings: Settings, cron: CronJobs, runs_each: int = 5) -> list[ScheduleView]:
    """jobkit's schedules with their newest runs, each flagged when it has stopped ticking."""
    jobs = cron.list()
    listed = schedule_rows(db, settings, cron, jobs)
    by_jobid = {j.jobid: j.name for j in jobs}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in cron.recent_runs(list(by_jobid), runs_each) if by_jobid else []:
        runs.setdefault(by_jobid[r["jobid"]], []).append(r)
    now = datetime.now(UTC)
    return [ScheduleView(row, runs.get(row.name, []), _late(row, now)) for row in listed]


def _late(row: ScheduleRow, now: datetime) -> bool:
    """Active and not run since it was last due. Interval schedules ('30 seconds') are due every
    interval; cron expressions by croniter. One that never ran is not called late (pg_cron keeps no
    creation time); scheduler_running says whether pg_cron runs anything at all."""
    if not row.active or row.last_start is None:
        return False
    previous = _previous_due(row.schedule, now - LATE_GRACE)
    return previous is not None and row.last_start < previous - LATE_GRACE


def _previous_due(schedule: str, at: datetime) -> datetime | None:
    words = schedule.split()
    if len(words) == 2 and words[1].startswith("second") and words[0].isdigit():
        return at - timedelta(seconds=int(words[0]))
    try:
        return croniter(schedule, at).get_prev(datetime)
    except (ValueError, KeyError):
        return None


def scheduler_running(session: Session, schema: str) -> bool:
    """pg_cron's launcher is alive in this server (pg_stat_activity shows every backend's type)."""
    return bool(session.scalar(queries(schema)["dash_cron_launcher"]))


def ratelimits(session: Session, schema: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    q = queries(schema)
    return session.all(q["dash_ratelimits"]), session.all(q["dash_snoozes"])


def audit_recent(session: Session, schema: str, limit: int = 50) -> list[dict[str, Any]]:
    return session.all(queries(schema)["dash_audit_recent"], {"limit": limit})
