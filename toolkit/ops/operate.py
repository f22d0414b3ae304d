"""The operator API: retry, cancel or delete jobs chosen by id or by filter, in batches, audited;
pause or resume a job type, audited. The CLI (`jobkit jobs retry|cancel|delete`, `jobkit pause`)
and the dashboard both act through it, so the same selection gives the same changes, the same
audit rows and the same :class:`Result`.

An action is counted first (:func:`count`, what the operator confirms), then :func:`start` writes
its audit row and :func:`run` works through it one batch per transaction (``BATCH`` jobs): each
batch locks its jobs, changes those whose state allows it, counts the others by reason, and adds
both to the audit row, all in the batch's transaction. A batch is atomic; a failure stops the
action there: the batches before it stay committed, the audit row and the result say how far it
got and why it stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from ..connector import Session, json_param
from ..exceptions import ConfigError, JobkitError
from ..queries import queries
from . import pauses
from .selection import ACTION_STATES, JobFilter

BATCH = 500
MAX_IDS = 1000  # ids in one selection; more means act on a filter
MAX_ACTOR = 1000  # characters of the audit log's actor
SAMPLE = 10  # jobs a confirmation shows before the action runs
MAX_LISTED = 100  # skipped jobs a result names one by one (all are counted)
VERBS = tuple(ACTION_STATES)
_FUNCTIONS = {"retry": "dash_retry_jobs", "cancel": "dash_cancel_jobs", "delete": "dash_delete_jobs"}
_DONE_STATE = {"retry": "pending", "cancel": "cancelled"}
_ALLOWED = {"retry": "only failed, dead or cancelled jobs retry",
            "cancel": "only pending or processing jobs cancel",
            "delete": "a processing job is not deleted: cancel it first"}
NOT_FOUND = "not found"
KEY_HELD = "its idempotency key is held by a newer unfinished job"


class Sessions(Protocol):
    """Where sessions come from: a connector.Database (the CLI) or SessionPool (the dashboard)."""

    def session(self) -> AbstractContextManager[Session]: ...


@dataclass(frozen=True)
class Operation:
    """What to do (retry, cancel, delete) to which jobs: the given ids, or every job matching the
    filter (ids None). An empty filter means every job, so it needs ``everything``."""

    verb: str
    ids: tuple[UUID, ...] | None = None
    filter: JobFilter = JobFilter()
    everything: bool = False

    def __post_init__(self) -> None:
        if self.verb not in ACTION_STATES:
            raise ConfigError(f"unknown action {self.verb!r}", hint="retry, cancel or delete")
        if self.ids is not None:
            _check_ids(self.ids, self.filter)
        elif self.filter.empty and not self.everything:
            raise ConfigError(f"no job ids and no filter: that would {self.verb} every job",
                              hint="give job ids or a filter (--type, --status, --key, --payload, ...), "
                                   "or --all to mean every job")
        self.filter.params()  # raises on a bad filter before anything runs

    @property
    def states(self) -> list[str]:
        return list(ACTION_STATES[self.verb])

    def describe(self) -> str:
        """Which jobs, in words: '3 selected jobs' or 'every job where type is x and ...'."""
        if self.ids is not None:
            return f"{len(self.ids)} selected job{'' if len(self.ids) == 1 else 's'}"
        return self.filter.describe() if self.filter.empty else "every job where " + self.filter.describe()

    def target(self) -> dict[str, Any]:
        """The audit log's record of the jobs acted on."""
        if self.ids is not None:
            return {"ids": [str(i) for i in self.ids]}
        return {"filter": self.filter.as_dict()}


def _check_ids(ids: tuple[UUID, ...], flt: JobFilter) -> None:
    if not ids:
        raise ConfigError("no jobs selected", hint="give job ids, or act on a filter")
    if len(ids) > MAX_IDS:
        raise ConfigError(f"{len(ids)} jobs selected; at most {MAX_IDS}",
                          hint="act on every job matching a filter instead")
    if not flt.empty:
        raise ConfigError("job ids and a filter given", hint="give either job ids or a filter")


def check_actor(actor: str) -> None:
    """Who acts, as the audit log records it: 1 to MAX_ACTOR characters of text."""
    if not actor.strip() or len(actor) > MAX_ACTOR or "\x00" in actor:
        raise ConfigError(f"who acts must be 1 to {MAX_ACTOR} characters of text, got {actor[:40]!r}",
                          hint="name who acts (the CLI's --as)")


@dataclass
class Result:
    """What an action did so far: changed (``done``), left alone (``skipped``, counted by reason,
    the first ``MAX_LISTED`` by id), and why it stopped early (``error``)."""

    audit_id: int
    verb: str
    matched: int
    done: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_ids: dict[UUID, str] = field(default_factory=dict)
    batches: int = 0
    error: str | None = None

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """One line: 'retry: 3 done, 1 skipped (1 not found)'."""
        text = f"{self.verb}: {self.done} done, {self.skipped_total} skipped"
        if self.skipped:
            text += " (" + ", ".join(f"{n} {why}" for why, n in sorted(self.skipped.items())) + ")"
        return text


Progress = Callable[[Result], None]


def count(session: Session, schema: str, op: Operation) -> int:
    """How many jobs the action would change now (those in a state it applies to)."""
    q = queries(schema)
    if op.ids is not None:
        return int(session.scalar(q["dash_ids_count"], {"ids": list(op.ids), "states": op.states}))
    return int(session.scalar(q["dash_jobs_count"], op.filter.params() | {"states": op.states}))


def sample(session: Session, schema: str, op: Operation, limit: int = SAMPLE) -> list[dict[str, Any]]:
    """The first ``limit`` jobs the action would change, in the order its batches take them
    (oldest first): id, type, status, created_at and the last line of the last error."""
    q = queries(schema)
    if op.ids is not None:
        return session.all(q["ops_ids_sample"], {"ids": list(op.ids), "states": op.states, "limit": limit})
    return session.all(q["ops_jobs_sample"], op.filter.params() | {"states": op.states, "limit": limit})


def start(session: Session, schema: str, op: Operation, actor: str, matched: int) -> int:
    """Write the audit row (who, what, which jobs, the count confirmed); returns its id."""
    check_actor(actor)
    return int(session.scalar(queries(schema)["dash_audit_start"], {
        "actor": actor, "action": op.verb, "target": json_param(op.target()), "matched": matched}))


def perform(sessions: Sessions, schema: str, op: Operation, actor: str, *, batch: int = BATCH,
            progress: Progress | None = None) -> Result:
    """Count, audit and run an action in one call (the CLI's way)."""
    with sessions.session() as s:
        matched = count(s, schema, op)
        audit_id = start(s, schema, op, actor, matched)
    return run(sessions, schema, audit_id, op, batch=batch, matched=matched, progress=progress)


def run(sessions: Sessions, schema: str, audit_id: int, op: Operation, *, batch: int = BATCH,
        matched: int = 0, progress: Progress | None = None) -> Result:
    """Apply the action batch by batch; the audit row and the result count what changed and what
    was left alone, and record the end (with the error that stopped it, if one did)."""
    result = Result(audit_id, op.verb, matched)
    try:
        with sessions.session() as session:
            for ids in _batches(session, schema, op, batch):
                _one_batch(session, schema, op, ids, result)
                if progress is not None:
                    progress(result)
    except JobkitError as exc:
        result.error = exc.message
    except Exception as exc:  # noqa: BLE001 - recorded on the audit row and the result
        result.error = f"{type(exc).__name__}: {exc}"
    except KeyboardInterrupt:  # Ctrl-C in the CLI: the audit row still says how far it got
        result.error = "interrupted"
        _finish(sessions, schema, result)
        raise
    _finish(sessions, schema, result)
    return result


def _finish(sessions: Sessions, schema: str, result: Result) -> None:
    with sessions.session() as session:
        session.execute(queries(schema)["dash_audit_finish"], {"id": result.audit_id, "error": result.error})


def _one_batch(session: Session, schema: str, op: Operation, ids: list[UUID], result: Result) -> None:
    """One transaction: lock the batch's jobs, change those whose state allows it, count the rest."""
    q = queries(schema)
    skipped: dict[UUID, str] = {}
    with session.transaction():
        found = {r["id"]: r["status"] for r in session.all(q["ops_lock_batch"], {"ids": ids})}
        for job_id in ids:
            status = found.get(job_id)
            if status is None:
                skipped[job_id] = NOT_FOUND
            elif status not in ACTION_STATES[op.verb]:
                skipped[job_id] = f"is {status}: {_ALLOWED[op.verb]}"
        eligible = [i for i in ids if i not in skipped]
        changed = int(session.scalar(q[_FUNCTIONS[op.verb]], {"ids": eligible})) if eligible else 0
        skipped |= _unchanged(session, schema, op.verb, eligible)
        totals = result.skipped + Counter(skipped.values())
        session.execute(q["dash_audit_progress"],
                        {"id": result.audit_id, "n": changed, "skipped": json_param(dict(totals))})
    result.done += changed
    result.skipped = totals
    result.batches += 1
    for job_id, why in skipped.items():
        if len(result.skipped_ids) < MAX_LISTED:
            result.skipped_ids[job_id] = why


def _unchanged(session: Session, schema: str, verb: str, eligible: list[UUID]) -> dict[UUID, str]:
    """Eligible jobs the function left as they were: a retried job whose idempotency key a newer
    unfinished job holds (retry_jobs leaves it and goes on)."""
    if verb not in _DONE_STATE or not eligible:
        return {}
    rows = session.all(queries(schema)["ops_statuses"], {"ids": eligible})
    return {r["id"]: KEY_HELD if verb == "retry" else f"stayed {r['status']}"
            for r in rows if r["status"] != _DONE_STATE[verb]}


def _batches(session: Session, schema: str, op: Operation, batch: int) -> Iterator[list[UUID]]:
    if op.ids is not None:
        ids = list(dict.fromkeys(op.ids))
        for i in range(0, len(ids), batch):
            yield ids[i:i + batch]
        return
    q = queries(schema)
    params = op.filter.params() | {"states": op.states, "limit": batch, "after_at": None, "after_id": None}
    while True:
        rows = session.all(q["dash_jobs_batch"], params)
        if rows:
            yield [r["id"] for r in rows]
        if len(rows) < batch:
            return
        params |= {"after_at": rows[-1]["created_at"], "after_id": rows[-1]["id"]}


def set_paused(sessions: Sessions, schema: str, job_type: str, key: str | None, *, paused: bool,
               actor: str) -> bool:
    """Pause (or resume) ``job_type`` or one key of it, and write the audit row in the same
    transaction; False when it was so already (audited with 0 changed)."""
    pauses.check(job_type, key)
    check_actor(actor)
    q = queries(schema)
    with sessions.session() as s, s.transaction():
        changed = bool(s.scalar(q["pause_type" if paused else "resume_type"], {"type": job_type, "key": key}))
        s.execute(q["dash_audit_pause"], {"actor": actor, "action": "pause_type" if paused else "resume_type",
                                          "type": job_type, "key": key, "changed": int(changed)})
    return changed
