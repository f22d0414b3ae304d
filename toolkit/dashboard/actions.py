"""Operator actions from the dashboard: retry, cancel or delete jobs, chosen by id or by "every job
matching this filter", in bounded batches, each written to the audit log.

An action is confirmed with its count first (:func:`count`), then :func:`start` writes its audit
row and :func:`run` works through it one batch per transaction, adding each batch's changes to the
audit row, so the page can show progress and an interrupted action shows how far it got.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..connector import Session, SessionPool, json_param
from ..exceptions import ConfigError, JobkitError
from ..queries import queries
from .filters import ACTION_STATES, JobFilter

BATCH = 500
MAX_SELECTED = 1000  # ids in one selection (a page holds 50; more means use the filter)
_FUNCTIONS = {"retry": "dash_retry_jobs", "cancel": "dash_cancel_jobs", "delete": "dash_delete_jobs"}


@dataclass(frozen=True)
class Action:
    """What to do (retry, cancel, delete) to which jobs: the selected ids, or every job matching
    the filter (ids None)."""

    verb: str
    ids: tuple[UUID, ...] | None = None
    filter: JobFilter = JobFilter()

    def __post_init__(self) -> None:
        if self.verb not in ACTION_STATES:
            raise ConfigError(f"unknown action {self.verb!r}", hint="retry, cancel or delete")
        if self.ids is not None and not self.ids:
            raise ConfigError("no jobs selected", hint="tick the jobs to act on, or act on the whole filter")
        if self.ids is not None and len(self.ids) > MAX_SELECTED:
            raise ConfigError(f"{len(self.ids)} jobs selected; at most {MAX_SELECTED}",
                              hint="act on every job matching the filter instead")

    @property
    def states(self) -> list[str]:
        return list(ACTION_STATES[self.verb])

    def target(self) -> dict[str, Any]:
        """The audit log's record of the jobs acted on."""
        if self.ids is not None:
            return {"ids": [str(i) for i in self.ids]}
        return {"filter": self.filter.as_dict()}


def count(session: Session, schema: str, action: Action) -> int:
    """How many jobs the action would change now (those in a state it applies to)."""
    q = queries(schema)
    if action.ids is not None:
        return int(session.scalar(q["dash_ids_count"], {"ids": list(action.ids), "states": action.states}))
    return int(session.scalar(q["dash_jobs_count"], action.filter.params() | {"states": action.states}))


def start(session: Session, schema: str, action: Action, actor: str, matched: int) -> int:
    """Write the audit row; returns its id."""
    return int(session.scalar(queries(schema)["dash_audit_start"], {
        "actor": actor, "action": action.verb, "target": json_param(action.target()), "matched": matched}))


def run(pool: SessionPool, schema: str, audit_id: int, action: Action, batch: int = BATCH) -> None:
    """Apply the action batch by batch; the audit row counts what changed and records the end."""
    q = queries(schema)
    error: str | None = None
    try:
        with pool.session() as session:
            for ids in _batches(session, schema, action, batch):
                with session.transaction():
                    changed = int(session.scalar(q[_FUNCTIONS[action.verb]], {"ids": ids}))
                    session.execute(q["dash_audit_progress"], {"id": audit_id, "n": changed})
    except JobkitError as exc:
        error = exc.message
    except Exception as exc:  # noqa: BLE001 - recorded on the audit row, never lost in a thread
        error = f"{type(exc).__name__}: {exc}"
    with pool.session() as session:
        session.execute(q["dash_audit_finish"], {"id": audit_id, "error": error})


def _batches(session: Session, schema: str, action: Action, batch: int) -> Iterator[list[UUID]]:
    if action.ids is not None:
        ids = list(action.ids)
        for i in range(0, len(ids), batch):
            yield ids[i:i + batch]
        return
    q = queries(schema)
    params = action.filter.params() | {"states": action.states, "limit": batch,
                                       "after_at": None, "after_id": None}
    while True:
        rows = session.all(q["dash_jobs_batch"], params)
        if rows:
            yield [r["id"] for r in rows]
        if len(rows) < batch:
            return
        params |= {"after_at": rows[-1]["created_at"], "after_id": rows[-1]["id"]}


def progress(session: Session, schema: str, audit_id: int) -> dict[str, Any] | None:
    row = session.one(queries(schema)["dash_audit_get"], {"id": audit_id})
    if row is not None:
        row["target_text"] = describe(row["target"])
    return row


def describe(target: Any) -> str:
    """The audit target as one line: 'ids: 3 jobs' or the filter's fields."""
    if isinstance(target, dict) and "ids" in target:
        return f"{len(target['ids'])} selected job(s)"
    if isinstance(target, dict) and "filter" in target:
        flt = target["filter"]
        return "every job matching " + (json.dumps(flt, sort_keys=True) if flt else "no filter (all jobs)")
    return json.dumps(target)
