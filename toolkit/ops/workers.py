"""The worker processes the workers table knows (0021), with the jobs each one holds now.

Read by `jobkit status`, `jobkit doctor` and the dashboard's /workers page. A worker's state is the
database's (sql/functions/75_workers.sql, worker_state): ``alive``, ``stale`` (it missed three
heartbeats and the sweep has not marked it yet) or ``gone`` (its clean shutdown or the sweep marked
it; the row is deleted an hour later). Its jobs are the leased rows whose worker_id is its id, read
through jobs_lease_idx (no scan of jobs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ..connector import Session
from ..queries import queries

HELD_SHOWN = 2000  # the most held jobs read at once (all workers together)
WORKERS_SHOWN = 500  # the most worker rows read at once (live ones first)


@dataclass(frozen=True)
class HeldJob:
    id: UUID
    type: str
    attempts: int
    started_at: datetime | None
    lease_expires_at: datetime | None


@dataclass
class WorkerRow:
    id: str
    host: str
    pid: int
    version: str
    transport: str
    concurrency: int
    types: list[str]
    running: int  # what it said at its last heartbeat
    heartbeat_s: float
    started_at: datetime
    last_seen: datetime
    seen_ago_s: float
    gone_at: datetime | None
    gone_reason: str | None
    state: str
    jobs: list[HeldJob] = field(default_factory=list)  # what the jobs table says it holds now

    @property
    def uptime_s(self) -> float:
        end = self.gone_at or self.last_seen
        return max((end - self.started_at).total_seconds(), 0.0)


def read(session: Session, schema: str, *, held: int = HELD_SHOWN,
         shown: int = WORKERS_SHOWN) -> list[WorkerRow]:
    """The worker rows (up to ``shown``, live ones first), each with the jobs it holds (up to
    ``held`` in all)."""
    q = queries(schema)
    workers = [_worker(r) for r in session.all(q["workers_list"], {"limit": shown})]
    live = [w.id for w in workers if w.state != "gone"]
    if live and held > 0:
        by_id = {w.id: w for w in workers}
        for r in session.all(q["workers_jobs"], {"ids": live, "limit": held}):
            by_id[r["worker_id"]].jobs.append(
                HeldJob(r["id"], r["type"], int(r["attempts"]), r["started_at"], r["lease_expires_at"]))
    return workers


def counts(session: Session, schema: str) -> dict[str, int]:
    """Workers by state (all of them), every state present."""
    out = {"alive": 0, "stale": 0, "gone": 0}
    for r in session.all(queries(schema)["worker_counts"]):
        out[r["state"]] = int(r["n"])
    return out


def _worker(r: dict[str, Any]) -> WorkerRow:
    return WorkerRow(
        id=r["id"], host=r["host"], pid=int(r["pid"]), version=r["version"], transport=r["transport"],
        concurrency=int(r["concurrency"]), types=list(r["types"] or []), running=int(r["running"]),
        heartbeat_s=float(r["heartbeat_s"]), started_at=r["started_at"], last_seen=r["last_seen"],
        seen_ago_s=max(float(r["seen_ago_s"]), 0.0), gone_at=r["gone_at"], gone_reason=r["gone_reason"],
        state=r["state"])
