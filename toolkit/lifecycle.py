"""The job lifecycle, spoken once.

Every step is a Statement: a named query of sql/queries/, its parameters in their cheapest form, and
how to read its rows. The sync ``Lifecycle`` runs them on a Session (operators, enqueue inside the
caller's transaction, tests); the worker's async PostgresBackend runs the same ones on a pool
(worker/backends/postgres.py), both through ``step(Statements.<name>)``. One name per step: the
Statement's, its named query's, the API schema's RPC wrapper's (sql/api.sql) and the backends'
(the worker's steps are listed once, by the Backend protocol in worker/backends/__init__.py;
the operator's retry, cancel, sweep_stuck, sweep_dead, prune and history are Lifecycle's only).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import update_wrapper
from itertools import chain
from operator import attrgetter
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar
from uuid import UUID

from psycopg.types.numeric import Int4

from .connector import Row, Session, json_param, uuid_array
from .exceptions import ConfigError
from .jobs import (
    Attempt,
    Claimed,
    Done,
    Failure,
    FlowRun,
    Job,
    JobResult,
    NewJob,
    Parent,
    StepRecord,
    TraceContext,
    WaitSpec,
    WorkerInfo,
)
from .queries import Named

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Statement(Generic[T]):
    """One step: its SQL, its parameters, and how to read its rows (tuples, or dicts when
    ``dicts``; ``binary`` asks for binary results, which decode faster)."""

    sql: str
    params: Mapping[str, Any]
    read: Callable[[list[Any]], T]
    binary: bool = False
    dicts: bool = False


class Statements:
    """Every lifecycle step as a Statement, for one schema. Pure: no I/O."""

    def __init__(self, schema: str = "jobkit") -> None:
        self.q = Named(schema)  # renders only the files of the queries it runs

    def enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> Statement[UUID]:
        if trace_context is None and _plain(job):
            return self.enqueue_plain(job)
        return Statement(self.q["enqueue"], enqueue_params(job, trace_context), _first_uuid)

    def enqueue_plain(self, job: NewJob) -> Statement[UUID]:
        """A job with only a type, a payload and a priority: the fixed-shape, three-parameter form."""
        return Statement(self.q["enqueue_plain"],
                         {"type": job.type, "payload": json_param(job.payload),
                          "priority": job.priority or 0},
                         _first_uuid)

    def enqueue_many(self, jobs: Sequence[NewJob],
                     trace_context: TraceContext | None = None) -> Statement[list[UUID]]:
        params = enqueue_many_params(jobs, trace_context)
        params["ids"] = uuid_array(new_ids(len(jobs)))
        return Statement(self.q["enqueue_many"], params, _column, binary=True)

    def claim(self, job_type: str, limit: int, worker: str, lease: timedelta, rate_key: str | None = None,
              max_attempts: int | None = None) -> Statement[list[Claimed]]:
        params = {"type": job_type, "limit": limit, "worker": worker, "lease": lease, "rate_key": rate_key,
                  "max_attempts": max_attempts}
        return Statement(self.q["claim"], params, _claimed, binary=True)

    def complete(self, done: Sequence[Done]) -> Statement[set[UUID]]:
        return Statement(self.q["complete"], complete_params(done), _id_set)

    def fail(self, failures: Sequence[Failure]) -> Statement[dict[UUID, str]]:
        return Statement(self.q["fail"], fail_params(failures), _id_map)

    def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> Statement[bool]:
        return Statement(self.q["snooze"], {"id": job_id, "attempt": attempt, "delay": delay}, _flag)

    def suspend(self, job_id: UUID, attempt: int, wait: WaitSpec) -> Statement[str | None]:
        """End the attempt in a wait: 'waiting', 'pending' (resolved at once), None (fenced out)."""
        return Statement(self.q["suspend"], suspend_params(job_id, attempt, wait), _text)

    def emit(self, name: str, key: str | None = None, data: Any = None,
             id: str | None = None) -> Statement[int]:  # noqa: A002 - the emit's own id
        """Store an event and wake what waits for it: the event's id."""
        params = {"name": name, "key": key, "data": json_param(data), "id": id}
        return Statement(self.q["emit"], params, _count)

    def sweep_waits(self) -> Statement[int]:
        return Statement(self.q["sweep_waits"], {}, _count)

    def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> Statement[set[UUID]]:
        return Statement(self.q["extend"], {**running_params(running), "by": by}, _id_set)

    def release(self, running: Sequence[tuple[UUID, int]]) -> Statement[set[UUID]]:
        return Statement(self.q["release"], running_params(running), _id_set)

    def running_check(self, running: Sequence[tuple[UUID, int]]) -> Statement[dict[UUID, str]]:
        """The attempts that no longer hold their job -> its status (cancelled: stop it)."""
        return Statement(self.q["running_check"], running_params(running), _id_map)

    def retry(self, job_id: UUID) -> Statement[bool]:
        return Statement(self.q["retry"], {"id": job_id}, _flag)

    def cancel(self, job_id: UUID) -> Statement[bool]:
        return Statement(self.q["cancel"], {"id": job_id}, _flag)

    def sweep_stuck(self) -> Statement[dict[UUID, str]]:
        return Statement(self.q["sweep_stuck"], {}, _id_map)

    def sweep_dead(self) -> Statement[int]:
        return Statement(self.q["sweep_dead"], {}, _count)

    def prune(self, older_than: timedelta, batch_size: int = 5000) -> Statement[int]:
        return Statement(self.q["prune"], {"older_than": older_than, "batch_size": batch_size}, _count)

    def get(self, job_id: UUID) -> Statement[Job | None]:
        return Statement(self.q["get"], {"id": job_id}, _job, dicts=True)

    def history(self, job_id: UUID) -> Statement[list[Attempt]]:
        return Statement(self.q["history"], {"id": job_id}, _attempts, dicts=True)

    def state(self, job_id: UUID) -> Statement[JobResult | None]:
        return Statement(self.q["state"], {"id": job_id}, _state, dicts=True)

    def flow_state(self, flow_id: UUID) -> Statement[list[JobResult]]:
        """A flow's jobs in order ([]: no such flow); results, errors and progress once all ended."""
        return Statement(self.q["flow_state"], {"id": flow_id}, _states, dicts=True)

    def wait_on(self, job_ids: Sequence[UUID], wait_for: timedelta) -> Statement[None]:
        """Register waiters: these jobs' completions are notified on <schema>_done (0014)."""
        return Statement(self.q["wait_on"], {"ids": list(job_ids), "for": wait_for}, _nothing)

    def create_flow(self, graph: Any, trace_context: TraceContext | None = None) -> Statement[FlowRun]:
        """Insert a graph (a jobkit.Flow) in one statement: its id and its jobs' ids in input order."""
        return Statement(self.q["create_flow"], flow_params(graph, trace_context), _flow_run)

    def parents(self, job_id: UUID) -> Statement[list[Parent]]:
        """A job's parents as they ended (ctx.parents)."""
        return Statement(self.q["parents"], {"id": job_id}, _parents)

    def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> Statement[set[UUID]]:
        return Statement(self.q["progress"], {**running_params([(r[0], r[1]) for r in reports]),
                                                  "progress": json_param([r[2] for r in reports])}, _id_set)

    # Durable steps (ctx.step, issue 25): a job's completed steps; one step's record, fenced.
    def load_steps(self, job_ids: Sequence[UUID]) -> Statement[dict[tuple[UUID, str, int], Any]]:
        return Statement(self.q["load_steps"], {"ids": list(job_ids)}, _steps, binary=True)  # binary both

    def save_steps(self, steps: Sequence[StepRecord], hold: bool = False) -> Statement[set[tuple[UUID, int]]]:
        """``hold``: lock the held jobs' rows until the transaction ends (a transactional step)."""
        return Statement(self.q["save_steps"], {**steps_params(steps), "hold": hold}, _pairs)

    def save_steps_direct(self, steps: Sequence[StepRecord]) -> Statement[set[tuple[UUID, int]]] | None:
        """save_steps' usual batch as one prepared statement of its own (no function call), for
        records whose names and occurrences are valid; None otherwise (save_steps refuses them).
        A record that meets a stored one fails it with a unique violation: send save_steps then."""
        if not all(0 < len(r.name) <= 200 and r.occurrence >= 1 for r in steps):
            return None
        return Statement(self.q["save_steps_direct"], steps_binary_params(steps), _pairs, binary=True)

    # What a worker needs besides the steps: rate-limit tokens, what is due, its keys.
    def take_tokens(self, key: str, want: int) -> Statement[int]:
        return Statement(self.q["take_tokens"], {"key": key, "want": want}, _count)

    def token_wait(self, key: str) -> Statement[float]:
        return Statement(self.q["token_wait"], {"key": key}, _seconds)

    def due_count(self, job_type: str) -> Statement[int]:
        return Statement(self.q["due_count"], {"type": job_type}, _count)

    def due_types(self) -> Statement[list[str]]:
        return Statement(self.q["due_types"], {}, _column)

    def next_due(self, job_type: str) -> Statement[float | None]:
        return Statement(self.q["next_due"], {"type": job_type}, _maybe_seconds)

    def backlog(self) -> Statement[list[Row]]:
        """Per type: pending jobs due now, and the oldest due one's age in seconds (/metrics)."""
        return Statement(self.q["backlog"], {}, list, dicts=True)

    def worker_keys(self) -> Statement[list[str]]:
        return Statement(self.q["worker_keys"], {}, _keys)

    def ping(self) -> Statement[None]:
        return Statement(self.q["ping"], {}, _nothing)

    def record_types(self, types: Sequence[str]) -> Statement[None]:
        return Statement(self.q["record_types"], {"types": list(types)}, _nothing)

    # Worker presence (0021): a heartbeat every few seconds, the clean shutdown's mark.
    def worker_beat(self, worker: WorkerInfo, running: int) -> Statement[None]:
        return Statement(self.q["worker_beat"], {
            "id": worker.id, "host": worker.host, "pid": worker.pid, "version": worker.version,
            "transport": worker.transport, "concurrency": worker.concurrency, "types": list(worker.types),
            "running": running, "heartbeat": worker.heartbeat, "started_at": worker.started_at}, _nothing)

    def worker_gone(self, worker_id: str) -> Statement[None]:
        return Statement(self.q["worker_gone"], {"id": worker_id}, _nothing)

    def worker_counts(self) -> Statement[list[Row]]:
        """Workers by state ('alive', 'stale', 'gone'): /metrics' jobkit_workers."""
        return Statement(self.q["worker_counts"], {}, list, dicts=True)
    # The wake path (0010): a signed wake-up accepted once per fleet; a worker draining a type.
    def consume_wake(self, nonce: str, expires_at: datetime) -> Statement[bool]:
        return Statement(self.q["consume_wake"], {"nonce": nonce, "expires_at": expires_at}, _flag)

    def wake_draining(self, job_type: str, until: timedelta) -> Statement[None]:
        return Statement(self.q["wake_draining"], {"type": job_type, "for": until}, _nothing)

    def wake_idle(self, job_type: str, handoff: bool = False) -> Statement[bool]:
        return Statement(self.q["wake_idle"], {"type": job_type, "handoff": handoff}, _flag)


def step(make: Callable[Concatenate[Statements, P], Statement[T]]) -> Callable[Concatenate[Lifecycle, P], T]:
    """A Lifecycle method that runs the Statement of the same name (``claim = step(Statements.claim)``)."""
    def run(self: Lifecycle, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.session.run(make(self.sql, *args, **kwargs))
    update_wrapper(run, make)  # its name, and inspect.signature shows the Statement's parameters
    return run


class Lifecycle:
    """The lifecycle on one Session: each step one statement (its effects are part of the session's
    transaction when it is in one). Each method is the Statement of its name, run."""

    def __init__(self, session: Session, schema: str = "jobkit") -> None:
        self.session = session
        self.sql = Statements(schema)

    enqueue = step(Statements.enqueue)
    claim = step(Statements.claim)
    complete = step(Statements.complete)
    fail = step(Statements.fail)
    snooze = step(Statements.snooze)
    suspend = step(Statements.suspend)
    emit = step(Statements.emit)
    sweep_waits = step(Statements.sweep_waits)
    extend = step(Statements.extend)
    release = step(Statements.release)
    retry = step(Statements.retry)
    cancel = step(Statements.cancel)
    sweep_stuck = step(Statements.sweep_stuck)
    sweep_dead = step(Statements.sweep_dead)
    prune = step(Statements.prune)
    get = step(Statements.get)
    history = step(Statements.history)
    state = step(Statements.state)
    flow_state = step(Statements.flow_state)
    wait_on = step(Statements.wait_on)
    create_flow = step(Statements.create_flow)
    parents = step(Statements.parents)

    def enqueue_many(self, jobs: Sequence[NewJob], trace_context: TraceContext | None = None) -> list[UUID]:
        if not jobs:
            return []
        self.session.adapt()  # the ids travel as a connector.UuidArray
        return self.session.run(self.sql.enqueue_many(jobs, trace_context))

    def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        return self.session.run(self.sql.progress(reports)) if reports else set()


# ---- parameters in their cheapest form ------------------------------------------------------------

#: A NewJob's fields after type and payload when none is set.
PLAIN_TAIL = (None,) * (len(NewJob._fields) - 2)


def _plain(job: NewJob) -> bool:
    """Nothing but a type, a payload and a priority: enqueue_plain's shape."""
    return (job.run_at is None and job.delay is None and job.max_attempts is None
            and job.idempotency_key is None
            and job.concurrency_key is None and job.debounce is None and job.throttle is None)


#: byte 6 of a UUID keeps its low four bits under version 4; byte 8 its low six under variant 10.
_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
_VARIANT_10 = bytes(b & 0x3F | 0x80 for b in range(256))


def new_ids(n: int) -> bytes:
    """n random version-4 UUIDs laid end to end (16 bytes each) from one os.urandom: what
    gen_random_uuid() makes, drawn in one call instead of one OpenSSL call a job on the server
    (8,600 instructions a job there, issue 23); sent as a binary uuid[] (connector.uuid_array)."""
    raw = bytearray(os.urandom(16 * n))
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT_10)
    return bytes(raw)


def enqueue_params(job: NewJob, trace_context: TraceContext | None = None) -> dict[str, Any]:
    return {
        "type": job.type, "payload": json_param(job.payload), "priority": job.priority or 0,
        "run_at": job.run_at, "delay": job.delay, "max_attempts": job.max_attempts,
        "idempotency_key": job.idempotency_key, "trace_context": _trace(trace_context),
        "concurrency_key": job.concurrency_key, "debounce": job.debounce, "throttle": job.throttle,
    }


def enqueue_many_params(jobs: Sequence[NewJob], trace_context: TraceContext | None = None) -> dict[str, Any]:
    """Payloads and types travel as JSON (one encode, no per-element array quoting; one type
    for all travels as one string); a column that is all defaults travels as a single NULL. The
    trace context, one for the batch, is stored on every job. The columns are slices of the jobs'
    fields laid end to end (C-level passes, not a Python loop a column: issue 23, stop 34)."""
    cols = Columns(jobs)
    types = cols[0]
    params = {
        "trace_context": _trace(trace_context),
        "types": json_param(types[0] if cols.n and types.count(types[0]) == cols.n else types),
        "payloads": json_param(cols[1]),
    }
    if cols.tails_unset():  # the commonest batch: every column NULL
        return params | dict.fromkeys(("priorities", "run_ats", "delays", "max_attempts", "idempotency_keys",
                                       "concurrency_keys"))
    return params | {
        "priorities": _nullable(cols[2]), "run_ats": _nullable(cols[3]), "delays": _nullable(cols[6]),
        "max_attempts": _nullable(cols[4]), "idempotency_keys": _nullable(cols[5]),
        "concurrency_keys": _nullable(cols[7]),
    }


class Columns:
    """A batch of NewJobs as columns: every job's fields laid end to end in one list (one pass in
    C), a column being a slice of it. ``cols[i]`` is field ``NewJob._fields[i]`` of every job."""

    WIDTH = len(NewJob._fields)

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self.n = len(jobs)
        self.flat = [*chain.from_iterable(jobs)]
        if len(self.flat) != self.WIDTH * self.n:
            raise ConfigError("each job to enqueue must be a jobkit.NewJob",
                              hint="build each one with jobkit.NewJob(type, payload)")

    def __getitem__(self, field: int) -> list[Any]:
        return self.flat[field::self.WIDTH]

    def tails_unset(self) -> bool:
        """No job has a field set after its payload."""
        return all(self[f].count(None) == self.n for f in range(2, self.WIDTH))


def plain_types(jobs: Sequence[Any]) -> set[Any] | None:
    """The distinct types of a batch in which every job is a NewJob with a dict or list payload
    and no other field set (the commonest batch), found in C-level passes; None for any other
    batch. For each job the same test as ``job.__class__ is NewJob and job[2:] == PLAIN_TAIL and
    job.payload.__class__ in (dict, list)``, without a Python loop over the jobs."""
    if {*map(_CLASS, jobs)} != {NewJob}:
        return None
    cols = Columns(jobs)
    if {*map(_CLASS, cols[1])} - {dict, list} or not cols.tails_unset():
        return None
    return set(cols[0])


_CLASS = attrgetter("__class__")


def flow_params(graph: Any, trace_context: TraceContext | None = None,
                owner: str | None = None) -> dict[str, Any]:
    """create_flow's parameters for a jobkit.Flow (toolkit/flows.py): like enqueue_many's (JSON
    documents for types and payloads), the edges as 1-based positions."""
    jobs = graph.jobs
    if not jobs:
        raise ConfigError("a flow needs at least one job", hint="add jobs with flow.add(type, payload)")
    types = [j.type for j in jobs]
    fan_in = bool(getattr(graph, "fan_in", False))  # a gather: its edges are implied, not sent
    edges = [] if fan_in else graph.edges
    policies = [e.policy for e in edges]
    return {
        "name": graph.name, "owner": owner, "trace_context": _trace(trace_context),
        "types": json_param(types[0] if types.count(types[0]) == len(types) else types),
        "payloads": json_param([j.payload for j in jobs]),
        "parents": [e.parent + 1 for e in edges], "children": [e.child + 1 for e in edges], "fan_in": fan_in,
        "policies": None if all(p == "fail" for p in policies) else policies,
        "priorities": _nullable([j.priority or None for j in jobs]),
        "run_ats": _nullable([j.run_at for j in jobs]), "delays": _nullable([j.delay for j in jobs]),
        "max_attempts": _nullable([j.max_attempts for j in jobs]),
    }


def complete_params(done: Sequence[Done]) -> dict[str, Any]:
    """Ids and attempts as one array literal each, the results (JSON text, encoded once by the
    worker) joined into one JSON array (psycopg's per-element array dumping costs about 3 us an
    element). All-null results travel as one NULL."""
    results = [d[2] for d in done]
    joined = None if results.count(None) == len(results) else (
        "[" + ",".join(["null" if r is None else r for r in results]) + "]")
    return {"ids": _uuids([d[0] for d in done]), "attempts": _ints([d[1] for d in done]), "results": joined}


def steps_params(steps: Sequence[StepRecord]) -> dict[str, Any]:
    """Steps' records as parallel arrays; their results (JSON text) joined into one JSON array,
    one NULL when all are null (like complete_params); errors one NULL when none failed."""
    results = [r.result for r in steps]
    errors = [r.error for r in steps]
    return {**running_params([(r.job_id, r.attempt) for r in steps]),
            "names": [r.name for r in steps], "occurrences": [r.occurrence for r in steps],
            "results": None if all(r is None for r in results) else (
                "[" + ",".join("null" if r is None else r for r in results) + "]"),
            "errors": None if all(e is None for e in errors) else errors,
            "tries": [r.tries for r in steps], "started_at": [r.started_at for r in steps]}


def steps_binary_params(steps: Sequence[StepRecord]) -> dict[str, Any]:
    """save_steps_direct's parameters: its arrays typed and sent in binary (the server copies
    uuids, int4s and timestamps instead of parsing array literals: 16,400 instructions a record
    at 16 records as text), the results as one JSON array (jsonb has no cheaper input)."""
    params = steps_params(steps)
    return {**params, "ids": [r.job_id for r in steps], "attempts": [Int4(r.attempt) for r in steps],
            "occurrences": [Int4(r.occurrence) for r in steps], "tries": [Int4(r.tries) for r in steps]}


def suspend_params(job_id: UUID, attempt: int, wait: WaitSpec) -> dict[str, Any]:
    return {"id": job_id, "attempt": attempt, "step": wait.step, "occurrence": wait.occurrence,
            "kind": wait.kind, "events": list(wait.events) or None,
            "keys": list(wait.keys) if wait.events else None, "due": wait.due,
            "job_ids": list(wait.job_ids) or None, "delay": wait.delay}


def running_params(running: Sequence[tuple[UUID, int]]) -> dict[str, str]:
    """(id, attempt) pairs as two array literals; uuids and ints need no quoting."""
    return {"ids": _uuids([r[0] for r in running]), "attempts": _ints([r[1] for r in running])}


def _uuids(ids: list[UUID]) -> str:
    """A uuid[] literal, each id as its 32 hex digits (uuid_in reads them as the hyphenated form;
    ``UUID.hex`` costs a third of ``str(UUID)``, which a worker paid per completed job). Ids given
    as text (the sync Lifecycle's callers may) go as given, as they always did."""
    try:
        return "{" + ",".join([i.hex for i in ids]) + "}"
    except AttributeError:
        return "{" + ",".join([str(i) for i in ids]) + "}"


def _ints(values: list[int]) -> str:
    return "{" + ",".join([str(int(v)) for v in values]) + "}"


def fail_params(failures: Sequence[Failure]) -> dict[str, Any]:
    return {
        "ids": [f.id for f in failures], "attempts": [f.attempt for f in failures],
        "errors": [f.error for f in failures], "retry_in": [f.retry_in for f in failures],
        "permanent": [f.permanent for f in failures],
    }


def _trace(trace_context: TraceContext | None) -> Any:
    return json_param(trace_context) if trace_context else None


def _nullable(values: list[Any]) -> list[Any] | None:
    return None if all(v is None for v in values) else values


# ---- reading rows -----------------------------------------------------------------------------------

def _first_uuid(rows: list[tuple[Any, ...]]) -> UUID:
    return UUID(str(rows[0][0]))


def _flow_run(rows: list[tuple[Any, ...]]) -> FlowRun:
    return FlowRun(rows[0][0], list(rows[0][1]))


def _parents(rows: list[tuple[Any, ...]]) -> list[Parent]:
    return [Parent(*r) for r in rows]


def _column(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [r[0] for r in rows]


def _claimed(rows: list[tuple[Any, ...]]) -> list[Claimed]:
    return [Claimed._make(r) for r in rows]


def _id_set(rows: list[tuple[Any, ...]]) -> set[UUID]:
    return {r[0] for r in rows}


def _id_map(rows: list[tuple[Any, ...]]) -> dict[UUID, str]:
    return {r[0]: r[1] for r in rows}


def _steps(rows: list[tuple[Any, ...]]) -> dict[tuple[UUID, str, int], Any]:
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def _pairs(rows: list[tuple[Any, ...]]) -> set[tuple[UUID, int]]:
    return {(r[0], r[1]) for r in rows}


def _text(rows: list[tuple[Any, ...]]) -> str | None:
    return None if not rows or rows[0][0] is None else str(rows[0][0])


def _flag(rows: list[tuple[Any, ...]]) -> bool:
    return bool(rows and rows[0][0])


def _count(rows: list[tuple[Any, ...]]) -> int:
    return int(rows[0][0] or 0) if rows else 0


def _seconds(rows: list[tuple[Any, ...]]) -> float:
    return float(rows[0][0] or 0.0) if rows else 0.0


def _maybe_seconds(rows: list[tuple[Any, ...]]) -> float | None:
    return None if not rows or rows[0][0] is None else float(rows[0][0])


def _keys(rows: list[tuple[Any, ...]]) -> list[str]:
    return [str(v) for v in (rows[0] if rows else ()) if v is not None]


def _nothing(_rows: list[Any]) -> None:
    return None


def _job(rows: list[Row]) -> Job | None:
    return Job.from_row(rows[0]) if rows else None


def _state(rows: list[Row]) -> JobResult | None:
    return JobResult.from_row(rows[0]) if rows else None


def _states(rows: list[Row]) -> list[JobResult]:
    return [JobResult.from_row(r) for r in rows]


def _attempts(rows: list[Row]) -> list[Attempt]:
    return [Attempt(**r) for r in rows]
