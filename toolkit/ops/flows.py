"""Job graphs for operators: `jobkit flows show|cancel|pause|resume` and `jobkit jobs replay`, and
the dashboard's job page (its steps and its graph). Each action runs in one transaction with its
audit row (audit_log: cancel_flow, pause_flow, resume_flow, replay)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ..connector import Session, json_param
from ..exceptions import ConfigError, NotFound
from ..queries import queries
from .operate import Sessions, check_actor

MAX_SHOWN = 2000  # jobs of one flow listed by `flows show` and the dashboard
MAX_STEP = 200  # characters of a step's name (job_steps' check)
WAIT_JOBS_SHOWN = 50  # the jobs a wait_for_jobs waits for, listed on the job page
EVENT_SEP = "\x1f"  # job_waits.events holds name || chr(31) || key (47_waits.sql)
ACTIONS = {"cancel": "cancel_flow", "pause": "pause_flow", "resume": "resume_flow"}


@dataclass(frozen=True)
class FlowView:
    """A flow with its jobs (at most MAX_SHOWN, in the order given) and its counts by status."""

    id: UUID
    name: str | None
    created_at: datetime
    paused_at: datetime | None
    counts: dict[str, int]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def parse_id(text: str, what: str = "flow") -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a {what} id",
                          hint=f"{what} ids are UUIDs; jobkit.flow() returns them (FlowRun.id)") from None


def resolve(s: Session, schema: str, some_id: UUID) -> UUID:
    """A flow's id from itself or from the id of one of its jobs; NotFound otherwise."""
    q = queries(schema)
    if s.one(q["flow_get"], {"id": some_id}) is not None:
        return some_id
    flow_id = s.scalar(q["flow_of"], {"id": some_id})
    if flow_id is None:
        raise NotFound(f"no flow {some_id}, and no job of a flow with that id",
                       hint="pass the id jobkit.flow() returned, or the id of one of its jobs")
    return UUID(str(flow_id))


def show(sessions: Sessions, schema: str, some_id: UUID, *, steps: bool = True) -> FlowView:
    """The flow (or the flow of the job ``some_id``): its jobs with their parents and, for durable
    jobs, their steps with their timing."""
    q = queries(schema)
    with sessions.session() as s:
        flow_id = resolve(s, schema, some_id)
        row = s.one(q["flow_get"], {"id": flow_id})
        assert row is not None
        counts = {r["status"]: int(r["n"]) for r in s.all(q["flow_counts"], {"id": flow_id})}
        jobs = s.all(q["flow_jobs"], {"id": flow_id, "limit": MAX_SHOWN})
        if steps:
            for job in jobs:
                job["steps"] = s.all(q["job_steps_of"], {"id": job["id"]})
    return FlowView(row["id"], row["name"], row["created_at"], row["paused_at"], counts, jobs)


def job_graph(s: Session, schema: str, job_id: UUID) -> dict[str, Any]:
    """The dashboard's job page: the job's steps, its open wait, parents and children (at most
    MAX_SHOWN each)."""
    q = queries(schema)
    return {"steps": s.all(q["job_steps_of"], {"id": job_id}),
            "wait": job_wait(s, schema, job_id),
            "parents": s.all(q["parents"], {"id": job_id}),
            "children": s.all(q["job_children"], {"id": job_id, "limit": MAX_SHOWN}),
            "flow_id": s.scalar(q["flow_of"], {"id": job_id})}


def job_wait(s: Session, schema: str, job_id: UUID) -> dict[str, Any] | None:
    """The job's open wait, readable: its events as (name, key) pairs and, for wait_for_jobs, the
    jobs it waits for with their state (at most WAIT_JOBS_SHOWN); None when it waits for nothing."""
    q = queries(schema)
    row = s.one(q["job_wait_of"], {"id": job_id})
    if row is None:
        return None
    events = [tuple(e.split(EVENT_SEP, 1)) if EVENT_SEP in e else (e, "") for e in row["events"] or []]
    ids = list(row["job_ids"] or [])
    jobs = s.all(q["job_wait_jobs"], {"ids": ids, "limit": WAIT_JOBS_SHOWN}) if ids else []
    return {**row, "events": events, "jobs": jobs, "jobs_total": len(ids)}


def act(sessions: Sessions, schema: str, some_id: UUID, verb: str, actor: str) -> int:
    """Cancel, pause or resume a flow, audited in the same transaction; how many jobs it changed."""
    if verb not in ACTIONS:
        raise ConfigError(f"unknown flow action {verb!r}", hint="cancel, pause or resume")
    check_actor(actor)
    q = queries(schema)
    with sessions.session() as s, s.transaction():
        flow_id = resolve(s, schema, some_id)
        changed = int(s.scalar(q[ACTIONS[verb]], {"id": flow_id}) or 0)
        s.execute(q["audit_flow"], {"actor": actor, "action": ACTIONS[verb],
                                    "target": json_param({"flow": str(flow_id)}), "changed": changed})
    return changed


def replay(sessions: Sessions, schema: str, job_id: UUID, step: str, actor: str) -> UUID:
    """A new job that copies the steps ``job_id`` stored before ``step`` and runs the rest anew;
    audited in the same transaction."""
    if not 1 <= len(step) <= MAX_STEP:
        raise ConfigError(f"a step's name is 1 to {MAX_STEP} characters, got {len(step)}",
                          hint="see the job's steps with `jobkit flows show ID`")
    check_actor(actor)
    q = queries(schema)
    with sessions.session() as s, s.transaction():
        new_id = UUID(str(s.scalar(q["replay_job"], {"id": job_id, "step": step})))
        s.execute(q["audit_flow"], {"actor": actor, "action": "replay", "changed": 1, "target": json_param(
            {"job": str(job_id), "from_step": step, "new_job": str(new_id)})})
    return new_id
