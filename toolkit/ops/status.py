"""`jobkit status`: the queue per type, wake-up health, the workers and the schedules, as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import Settings
from ..connector import Database
from ..cron import schedules as scheduling
from ..durations import format_time
from ..queries import queries
from . import workers as worker_rows

TOP_KEYS = 20  # the busiest concurrency keys `jobkit status` shows


@dataclass
class TypeStatus:
    type: str
    runnable: int = 0
    scheduled: int = 0
    processing: int = 0
    completed_1h: int = 0
    failed_attempts_1h: int = 0  # failed attempts (retried or final) in the last hour
    dead_jobs_1h: int = 0  # jobs that became dead in the last hour
    oldest_runnable_s: float | None = None
    per_minute: float = 0.0  # completions per minute over the last 5 minutes
    cancelled_1h: int = 0
    keys: int = 0  # concurrency keys with pending or running jobs
    fair: bool = False  # claims go by key (round-robin, limits below)
    max_running_per_key: int | None = None
    max_running: int | None = None
    paused: bool = False
    paused_keys: int = 0


@dataclass
class KeyStatus:
    type: str
    key: str
    running: int
    runnable: int


@dataclass
class QueueStatus:
    types: list[TypeStatus] = field(default_factory=list)
    wakeups: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> outcome -> count
    schedules: list[dict[str, Any]] = field(default_factory=list)
    keys: list[KeyStatus] = field(default_factory=list)  # the busiest concurrency keys
    pauses: list[dict[str, Any]] = field(default_factory=list)  # {type, key (None: the type), paused_at}
    workers: list[worker_rows.WorkerRow] = field(default_factory=list)  # the workers table (0021)
    worker_counts: dict[str, int] = field(default_factory=dict)  # all of them by state

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def collect(db: Database, settings: Settings, *, with_schedules: bool = True) -> QueueStatus:
    q = queries(settings.schema)
    with db.session() as s:
        failures = {r["type"]: int(r["failed_1h"]) for r in s.all(q["status_failures"])}
        types = [_type_status(r, failures) for r in s.all(q["status_types"])]
        _add_limits(types, s.all(q["status_limits"]))
        keys = [KeyStatus(r["type"], r["key"], int(r["running"]), int(r["runnable"]))
                for r in s.all(q["status_keys"], {"limit": TOP_KEYS})]
        paused = [{"type": r["type"], "key": r["key"], "paused_at": r["paused_at"]}
                  for r in s.all(q["pauses_all"])]
        wakeups: dict[str, dict[str, int]] = {}
        for r in s.all(q["status_wakeups"]):
            wakeups.setdefault(r["type"], {})[r["outcome"]] = int(r["n"])
        workers, counted = worker_rows.read(s, settings.schema), worker_rows.counts(s, settings.schema)
    status = QueueStatus(types=types, wakeups=wakeups, keys=keys, pauses=paused, workers=workers,
                         worker_counts=counted)
    if with_schedules:
        status.schedules = [
            {"name": r.name, "schedule": r.schedule, "active": r.active, "last_status": r.last_status,
             "last_run": format_time(r.last_start) if r.last_start else None,
             "next_run": format_time(r.next_run) if r.next_run else None}
            for r in scheduling.rows(db, settings)
        ]
    return status


def _add_limits(types: list[TypeStatus], rows: list[dict[str, Any]]) -> None:
    """Fair types' limits and pauses onto their rows (a paused type without jobs gets a row)."""
    by_type = {t.type: t for t in types}
    for r in rows:
        t = by_type.get(r["type"])
        if t is None:
            t = by_type[r["type"]] = TypeStatus(type=r["type"])
            types.append(t)
        t.fair, t.max_running_per_key, t.max_running = r["fair"], r["max_running_per_key"], r["max_running"]
        t.paused, t.paused_keys = r["paused"], int(r["paused_keys"])
    types.sort(key=lambda t: t.type)


def _type_status(row: dict[str, Any], failures: dict[str, int]) -> TypeStatus:
    return TypeStatus(
        type=row["type"], runnable=int(row["runnable"]), scheduled=int(row["scheduled"]),
        processing=int(row["processing"]), completed_1h=int(row["completed_1h"]),
        failed_attempts_1h=failures.get(row["type"], 0), dead_jobs_1h=int(row["dead_1h"]),
        oldest_runnable_s=row["oldest_runnable_s"], per_minute=round(int(row["completed_5m"]) / 5, 1),
        cancelled_1h=int(row["cancelled_1h"]), keys=int(row["keys"]),
    )
