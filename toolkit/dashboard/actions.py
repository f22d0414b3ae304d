"""Operator actions from the dashboard: the operator API's (toolkit/ops/operate.py), which the
CLI uses too. Retry, cancel or delete jobs chosen by id or by "every job matching this filter", in
bounded batches, each written to the audit log.

An action is confirmed with its count first (:func:`count`), then :func:`start` writes its audit
row and :func:`run` works through it one batch per transaction, adding each batch's changes to the
audit row, so the page can show progress and an interrupted action shows how far it got.
"""

from __future__ import annotations

import json
from typing import Any

from ..connector import Session
from ..ops.operate import BATCH, MAX_IDS, Operation, Sessions, count, start
from ..ops.operate import run as _run
from ..queries import queries

Action = Operation
MAX_SELECTED = MAX_IDS  # ids in one selection (a page holds 50; more means use the filter)

__all__ = ["BATCH", "MAX_SELECTED", "Action", "count", "describe", "progress", "run", "start"]


def run(pool: Sessions, schema: str, audit_id: int, action: Action, batch: int = BATCH) -> None:
    """Apply the action batch by batch (in the dashboard's worker thread); the audit row records
    what changed, what was left alone and the end."""
    _run(pool, schema, audit_id, action, batch=batch)


def progress(session: Session, schema: str, audit_id: int) -> dict[str, Any] | None:
    row = session.one(queries(schema)["dash_audit_get"], {"id": audit_id})
    if row is not None:
        row["target_text"] = describe(row["target"])
        row["skipped_text"] = describe_skipped(row.get("skipped"))
    return row


def describe(target: Any) -> str:
    """The audit target as one line: 'ids: 3 jobs' or the filter's fields."""
    if isinstance(target, dict) and "ids" in target:
        return f"{len(target['ids'])} selected job(s)"
    if isinstance(target, dict) and "filter" in target:
        flt = target["filter"]
        return "every job matching " + (json.dumps(flt, sort_keys=True) if flt else "no filter (all jobs)")
    return json.dumps(target)


def describe_skipped(skipped: Any) -> str:
    """The jobs an action left alone, by reason: '2 not found, 1 is pending: ...' ('' for none)."""
    if not isinstance(skipped, dict):
        return ""
    return ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()) if n)
