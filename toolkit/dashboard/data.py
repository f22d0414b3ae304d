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
from ..cron import runnow
from ..cron.pg_cron import CronJobs, schedules_of
from ..cron.schedules import ScheduleRow
from ..cron.schedules import rows as schedule_rows
from ..jobs import Attempt, Job
from ..lifecycle import Lifecycle
from ..queries import queries
from .filters import STATES, JobFilter

PAGE_SIZE = 50
#: Counts are exact up to this many jobs; beyond it the page shows the planner's estimate, and says so.
BOUND = 10_000
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
    #: types no worker has served and jobkit.toml does not configure, with no job running, due or
    #: finished in the last day: typos, mostly. The overview folds them away, with a clean-up.
    stale: list[TypeRow] = field(default_factory=list)


def stale_types(session: Session, schema: str, types: list[str], declared: set[str]) -> set[str]:
    """Of ``types``, those with no handler (no worker served it, jobkit.toml does not configure
    it) and no recent job (none running, due in the last day or later, or finished in the last day)."""
    q = queries(schema)
    candidates = [t for t in types if t not in declared]
    if not candidates:
        return set()
    handled = {r["type"] for r in session.all(q["dash_types_handled"], {"types": candidates})}
    unhandled = [t for t in candidates if t not in handled]
    if not unhandled:
        return set()
    recent = {r["type"] for r in session.all(q["dash_types_recent"], {"types": unhandled})}
    return {t for t in unhandled if t not in recent}


def overview(session: Session, schema: str, declared: set[str] | None = None) -> Overview:
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
    stale = stale_types(session, schema, [t for t in rows if t not in paused], declared or set())
    ordered = sorted(rows.values(), key=lambda t: t.type)
    return Overview(types=[t for t in ordered if t.type not in stale], wakeups=wakeups, paused=paused,
                    stale=[t for t in ordered if t.type in stale])


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


@dataclass(frozen=True)
class Total:
    """A count as the pages show it: exact up to ``bound``, else an estimate (``exact`` False),
    or unknown beyond the bound when the database has no statistics yet (``n`` None)."""

    n: int | None
    exact: bool
    bound: int = BOUND

    @property
    def text(self) -> str:
        if self.exact and self.n is not None:
            return f"{self.n:,}"
        if self.n is None:
            return f"{self.bound:,}+"
        return "≈ " + _compact(self.n)

    @property
    def how(self) -> str:
        """What the number is, for its title and the page's words."""
        if self.exact:
            return "exact count"
        more = f"more than {self.bound:,}"
        return f"{more}: estimate from the planner's statistics" if self.n is not None else (
            f"{more} (no statistics yet for an estimate)")


@dataclass(frozen=True)
class StateCount:
    state: str
    total: Total


def state_counts(session: Session, schema: str, job_type: str | None, bound: int = BOUND) -> list[StateCount]:
    """Jobs in each state (all types or one), exact up to ``bound`` each; a state beyond it gets the
    estimate of :func:`_state_estimate`. Every state the jobs.status check allows, in STATES order."""
    q = queries(schema)
    row = session.one(q["dash_state_counts"], {"type": job_type, "bound": bound + 1}) or {}
    found = [StateCount(state, Total(int(row.get(state) or 0), True, bound)) for state in STATES]
    if all(c.total.n is not None and c.total.n <= bound for c in found):
        return found
    stats = session.one(q["dash_state_estimates"], {"schema": schema, "type": job_type}) or {}
    return [c if c.total.n is not None and c.total.n <= bound else
            StateCount(c.state, Total(_state_estimate(stats, c.state, job_type, bound), False, bound))
            for c in found]


def _state_estimate(stats: dict[str, Any], state: str, job_type: str | None, bound: int) -> int | None:
    """Rows of jobs x the state's share (x the type's): pg_class.reltuples and pg_stats, as the
    planner estimates; None without statistics (never analyzed, or the value not among the common
    ones). Never below what was counted exactly (more than ``bound``)."""
    rows, shares = float(stats.get("reltuples") or -1), stats.get("status_freqs") or {}
    share = shares.get(state)
    if rows <= 0 or share is None or (job_type is not None and stats.get("type_freq") is None):
        return None
    estimate = rows * float(share) * (float(stats["type_freq"]) if job_type is not None else 1.0)
    return max(int(estimate), bound + 1)


def filter_total(session: Session, schema: str, flt: JobFilter, page: JobsPage, first_page: bool,
                 bound: int = BOUND) -> Total:
    """How many jobs match the filter: the first page's rows when they are all of them (no query),
    else a count up to ``bound``, else the planner's estimate (EXPLAIN: nothing is run)."""
    if first_page and page.next_cursor is None:
        return Total(len(page.rows), True, bound)
    q = queries(schema)
    n = int(session.scalar(q["dash_filter_count"], flt.params() | {"bound": bound + 1}))
    if n <= bound:
        return Total(n, True, bound)
    plan = session.scalar(q["dash_filter_estimate"], flt.params())
    try:
        estimate = int(plan[0]["Plan"]["Plan Rows"])
    except (TypeError, KeyError, IndexError, ValueError):
        return Total(None, False, bound)
    return Total(max(estimate, bound + 1), False, bound)


def _compact(n: int) -> str:
    """1,234,567 as '1.2M', 35,000 as '35k'."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            value = n / size
            return f"{value:.1f}{suffix}" if value < 10 else f"{value:.0f}{suffix}"
    return str(n)


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
    runs: list[dict[str, Any]]  # newest first
    late: bool  # active, and its last run is older than its previous due time (plus a grace)
    queued: bool = False  # a "run now" waits for pg_cron's next minute

    @property
    def strip(self) -> list[dict[str, Any]]:
        """The runs oldest first, as the strip of successes and failures reads left to right."""
        return list(reversed(self.runs))


def schedules(db: Database, settings: Settings, cron: CronJobs, runs_each: int = 5) -> list[ScheduleView]:
    """jobkit's schedules with their newest runs (a "run now" one-off's runs count as the
    schedule's), each flagged when it has stopped ticking or has a run now queued."""
    every = cron.every()
    jobs = schedules_of(every)
    listed = schedule_rows(db, settings, cron, jobs)
    by_jobid = {j.jobid: j.name for j in jobs}
    for job in every:  # the one-offs of "run now": now:<the schedule's jobid>
        ident = job.name[len(runnow.MARK):] if job.name.startswith(runnow.MARK) else ""
        if ident.isdigit() and int(ident) in by_jobid:
            by_jobid[job.jobid] = by_jobid[int(ident)]
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in cron.recent_runs(list(by_jobid), runs_each) if by_jobid else []:
        runs.setdefault(by_jobid[r["jobid"]], []).append(r)
    queued = set(runnow.pending_in(every, jobs))
    now = datetime.now(UTC)
    return [ScheduleView(row, sorted(runs.get(row.name, []), key=_started, reverse=True)[:runs_each],
                         _late(row, now), row.name in queued) for row in listed]


def _started(run: dict[str, Any]) -> datetime:
    return run.get("start_time") or datetime.min.replace(tzinfo=UTC)


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
