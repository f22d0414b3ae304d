"""The Data API backend: the same lifecycle calls as RPCs to jobkit's API schema (``[api] schema``,
sql/api.sql) through supabase-py's async client, for hosts that have only the project URL and the
service_role key. Slower than postgres.py (one HTTPS request per call) but needs no database URL.

The API schema must be listed in the project's "Exposed schemas" and the key must be service_role:
the wrappers grant nothing to anon or authenticated. The key is never put in a message or a log.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
from postgrest import APIError, AsyncPostgrestClient

from supabase import AsyncClient, AsyncClientOptions, acreate_client

from ...exceptions import ConfigError, ConnectionFailed, DatabaseError
from ...jobs import (
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
from ...lifecycle import enqueue_many_params, flow_params

_HINTS = {
    "42501": "use the service_role key: the API schema grants nothing to anon or authenticated",
    "PGRST106": "add the API schema to the project's Exposed schemas (Settings > Data API)",
    "PGRST202": "run `jobkit deploy` with `[api] schema` set so the wrapper functions exist",
    "PGRST301": "use the project's service_role key",
}


class SupabaseBackend:
    """Backend over Supabase's Data API (PostgREST RPC) with supabase-py's async client."""

    def __init__(self, url: str, service_key: str, api_schema: str = "jobkit_api", *,
                 timeout: float = 30.0) -> None:
        self.url = url
        self.api_schema = api_schema
        self.timeout = timeout
        self._key = service_key
        self._client: AsyncClient | None = None
        self._api: AsyncPostgrestClient | None = None

    def __repr__(self) -> str:
        return f"SupabaseBackend(url={self.url!r}, api_schema={self.api_schema!r})"

    async def open(self) -> None:
        if self._client is not None:
            return
        options = AsyncClientOptions(auto_refresh_token=False, persist_session=False,
                                     postgrest_client_timeout=self.timeout)
        try:
            with warnings.catch_warnings():  # supabase-py passes postgrest-py's deprecated timeout itself
                warnings.simplefilter("ignore", DeprecationWarning)
                self._client = await acreate_client(self.url, self._key, options=options)
                self._api = self._client.schema(self.api_schema)
        except Exception as exc:  # supabase-py validates the URL and key shape
            self._client = None
            raise DatabaseError(f"cannot create the Supabase client for {self.url}: "
                                f"{self._clean(str(exc))}",
                                hint="pass the project URL (https://<ref>.supabase.co) and the "
                                     "service_role key") from None

    async def close(self) -> None:
        client, self._client, self._api = self._client, None, None
        if client is not None:
            await client.postgrest.aclose()

    async def enqueue(self, job: NewJob, trace_context: TraceContext | None = None) -> UUID:
        return (await self.enqueue_many([job], trace_context))[0]

    async def enqueue_many(self, jobs: Sequence[NewJob],
                           trace_context: TraceContext | None = None) -> list[UUID]:
        if not jobs:
            return []
        rows = await self._rpc("enqueue_many", enqueue_many_body(jobs, trace_context))
        return [UUID(r["id"]) for r in sorted(rows, key=lambda r: r["ord"])]

    async def get(self, job_id: UUID) -> Job | None:
        rows = await self._rpc("get", {"p_id": str(job_id)})
        return _job(rows[0]) if rows else None

    async def state(self, job_id: UUID) -> JobResult | None:
        rows = await self._rpc("state", {"p_id": str(job_id)})
        return state_from_rpc(rows)

    async def progress(self, reports: Sequence[tuple[UUID, int, dict[str, Any]]]) -> set[UUID]:
        if not reports:
            return set()
        ids = await self._rpc("progress", {
            "p_ids": [str(r[0]) for r in reports], "p_attempts": [r[1] for r in reports],
            "p_progress": [r[2] for r in reports]})
        return {UUID(i) for i in ids or []}

    async def claim(self, job_type: str, limit: int, worker: str, lease: timedelta,
                    rate_key: str | None = None, max_attempts: int | None = None) -> list[Claimed]:
        rows = await self._rpc("claim", {"p_type": job_type, "p_limit": limit, "p_worker": worker,
                                              "p_lease": _interval(lease), "p_rate_key": rate_key,
                                              "p_max_attempts": max_attempts})
        return [_claimed(r) for r in rows or []]

    async def complete(self, done: Sequence[Done]) -> set[UUID]:
        ids = await self._rpc("complete", {
            "p_ids": [str(d[0]) for d in done], "p_attempts": [d[1] for d in done],
            "p_results": [None if d[2] is None else json.loads(d[2]) for d in done]})
        return {UUID(i) for i in ids or []}

    async def fail(self, failures: Sequence[Failure]) -> dict[UUID, str]:
        rows = await self._rpc("fail", {
            "p_ids": [str(f.id) for f in failures], "p_attempts": [f.attempt for f in failures],
            "p_errors": [f.error for f in failures],
            "p_retry_in": [_interval(f.retry_in) for f in failures],
            "p_permanent": [f.permanent for f in failures]})
        return {UUID(r["id"]): str(r["status"]) for r in rows or []}

    async def snooze(self, job_id: UUID, attempt: int, delay: timedelta) -> bool:
        return bool(await self._rpc("snooze", {
            "p_id": str(job_id), "p_attempt": attempt, "p_delay": _interval(delay)}))

    async def suspend(self, job_id: UUID, attempt: int, wait: WaitSpec) -> str | None:
        status = await self._rpc("suspend", {
            "p_id": str(job_id), "p_attempt": attempt, "p_step": wait.step, "p_occurrence": wait.occurrence,
            "p_kind": wait.kind, "p_events": list(wait.events) or None,
            "p_keys": list(wait.keys) if wait.events else None,
            "p_due": None if wait.due is None else wait.due.isoformat(),
            "p_job_ids": [str(i) for i in wait.job_ids] or None,
            "p_delay": None if wait.delay is None else _interval(wait.delay)})
        return None if status is None else str(status)

    async def emit(self, name: str, key: str | None = None, data: Any = None,
                   id: str | None = None) -> int:  # noqa: A002 - the emit's own id
        return int(await self._rpc("emit", {"p_name": name, "p_key": key, "p_data": data, "p_id": id}))

    async def extend(self, running: Sequence[tuple[UUID, int]], by: timedelta) -> set[UUID]:
        ids = await self._rpc("extend", {
            "p_ids": [str(r[0]) for r in running], "p_attempts": [r[1] for r in running],
            "p_by": _interval(by)})
        return {UUID(i) for i in ids or []}

    async def release(self, running: Sequence[tuple[UUID, int]]) -> set[UUID]:
        ids = await self._rpc("release", {
            "p_ids": [str(r[0]) for r in running], "p_attempts": [r[1] for r in running]})
        return {UUID(i) for i in ids or []}

    async def running_check(self, running: Sequence[tuple[UUID, int]]) -> dict[UUID, str]:
        if not running:
            return {}
        rows = await self._rpc("running_check", {"p_ids": [str(i) for i, _a in running],
                                                 "p_attempts": [a for _i, a in running]})
        return {UUID(r["id"]): r["status"] for r in rows or []}

    async def load_steps(self, job_ids: Sequence[UUID]) -> dict[tuple[UUID, str, int], Any]:
        if not job_ids:
            return {}
        rows = await self._rpc("load_steps", {"p_ids": [str(i) for i in job_ids]})
        return {(UUID(r["job_id"]), r["name"], r["occurrence"]): r["result"] for r in rows or []}

    async def save_steps(self, steps: Sequence[StepRecord], hold: bool = False) -> set[tuple[UUID, int]]:
        if not steps:
            return set()
        rows = await self._rpc("save_steps", {
            "p_ids": [str(r.job_id) for r in steps], "p_attempts": [r.attempt for r in steps],
            "p_names": [r.name for r in steps], "p_occurrences": [r.occurrence for r in steps],
            "p_results": [None if r.result is None else json.loads(r.result) for r in steps],
            "p_errors": [r.error for r in steps], "p_tries": [r.tries for r in steps],
            "p_started_at": [r.started_at.isoformat() for r in steps], "p_hold": hold})
        return {(UUID(r["id"]), r["attempt"]) for r in rows or []}

    async def create_flow(self, graph: Any, trace_context: TraceContext | None = None) -> FlowRun:
        return flow_run_from_rpc(await self._rpc("create_flow", create_flow_body(graph, trace_context)))

    async def parents(self, job_id: UUID) -> list[Parent]:
        rows = await self._rpc("parents", {"p_id": str(job_id)})
        return [Parent(UUID(r["id"]), r["type"], r["status"], r["result"], r["error"], r["on_parent_failure"])
                for r in rows or []]

    async def flow_state(self, flow_id: UUID) -> list[JobResult]:
        return states_from_rpc(await self._rpc("flow_state", {"p_id": str(flow_id)}))

    async def take_tokens(self, key: str, want: int) -> int:
        return int(await self._rpc("take_tokens", {"p_key": key, "p_want": want}) or 0)

    async def token_wait(self, key: str) -> float:
        return float(await self._rpc("token_wait", {"p_key": key}) or 0.0)

    async def due_count(self, job_type: str) -> int:
        return int(await self._rpc("due_count", {"p_type": job_type}) or 0)

    async def due_types(self) -> list[str]:
        return [str(t) for t in await self._rpc("due_types", {}) or []]

    async def next_due(self, job_type: str) -> float | None:
        value = await self._rpc("next_due", {"p_type": job_type})
        return None if value is None else float(value)

    async def worker_keys(self) -> list[str]:
        rows = await self._rpc("worker_keys", {})
        return [str(v) for row in rows or [] for v in row.values() if v is not None]

    async def ping(self) -> None:
        await self._rpc("ping", {})

    async def record_types(self, types: Sequence[str]) -> None:
        await self._rpc("record_types", {"p_types": list(types)})

    async def worker_beat(self, worker: WorkerInfo, running: int) -> None:
        await self._rpc("worker_beat", {
            "p_id": worker.id, "p_host": worker.host, "p_pid": worker.pid, "p_version": worker.version,
            "p_transport": worker.transport, "p_concurrency": worker.concurrency,
            "p_types": list(worker.types), "p_running": running, "p_heartbeat": _interval(worker.heartbeat),
            "p_started_at": worker.started_at.isoformat()})

    async def worker_gone(self, worker_id: str) -> None:
        await self._rpc("worker_gone", {"p_id": worker_id})
    async def consume_wake(self, nonce: str, expires_at: datetime) -> bool:
        params = {"p_nonce": nonce, "p_expires_at": expires_at.isoformat()}
        return bool(await self._rpc("consume_wake", params))

    async def wake_draining(self, job_type: str, until: timedelta) -> None:
        await self._rpc("wake_draining", {"p_type": job_type, "p_for": _interval(until)})

    async def wake_idle(self, job_type: str, handoff: bool = False) -> bool:
        return bool(await self._rpc("wake_idle", {"p_type": job_type, "p_handoff": handoff}))

    async def _rpc(self, fn: str, params: dict[str, Any]) -> Any:
        """POST /rest/v1/rpc/<fn> in the API schema; the decoded JSON body."""
        if self._api is None:
            raise DatabaseError("the Supabase backend is not open", hint="await backend.open() first")
        try:
            response = await self._api.rpc(fn, params).execute()
        except APIError as exc:
            code = exc.code or ""
            text = self._clean(exc.message or "no message")
            hint = "; ".join(h for h in (self._clean(exc.hint or ""), _HINTS.get(code, "")) if h)
            raise DatabaseError(f"Data API call {self.api_schema}.{fn} failed"
                                f"{f' ({code})' if code else ''}: {text}", hint=hint) from None
        except httpx.HTTPError as exc:
            raise ConnectionFailed(
                f"cannot reach the Data API at {self.url} ({type(exc).__name__}: "
                f"{self._clean(str(exc)) or 'no detail'})",
                hint="check SUPABASE_URL and the network; the project may be paused") from None
        return response.data

    def _clean(self, text: str) -> str:
        """One line, and never the key."""
        return " ".join((text.replace(self._key, "[service key]") if self._key else text).split())


def _interval(value: timedelta | None) -> str | None:
    return None if value is None else f"{value.total_seconds():.6f} seconds"


def enqueue_many_body(jobs: Sequence[NewJob], trace_context: TraceContext | None = None) -> dict[str, Any]:
    """api.enqueue_many's arguments (the payloads as one JSON array; run_at, never delay, since the
    wrapper takes absolute times)."""
    if any(j.delay is not None for j in jobs):
        raise ConfigError("delay is not supported through the Data API", hint="pass run_at instead")
    if any(j.debounce is not None or j.throttle is not None for j in jobs):
        raise ConfigError("debounce and throttle are not supported through the Data API",
                          hint="enqueue them over a database connection (JOBKIT_DB_URL)")
    params = enqueue_many_params(jobs)
    return {"p_type": [j.type for j in jobs], "p_payload": [j.payload for j in jobs],
            "p_priority": params["priorities"],
            "p_run_at": [j.run_at.isoformat() if j.run_at else None for j in jobs],
            "p_max_attempts": params["max_attempts"], "p_idempotency_key": params["idempotency_keys"],
            "p_trace_context": trace_context or None, "p_concurrency_key": params["concurrency_keys"]}


def create_flow_body(graph: Any, trace_context: TraceContext | None = None) -> dict[str, Any]:
    """api.create_flow's arguments (run_at, never delay: the wrapper takes absolute times)."""
    if any(j.delay is not None for j in graph.jobs):
        raise ConfigError("delay is not supported through the Data API", hint="pass run_at instead")
    params = flow_params(graph)  # the wrapper takes edges only: a gather's are sent as edges
    policies = [e.policy for e in graph.edges]
    return {"p_name": graph.name, "p_types": [j.type for j in graph.jobs],
            "p_payloads": [j.payload for j in graph.jobs], "p_parents": [e.parent + 1 for e in graph.edges],
            "p_children": [e.child + 1 for e in graph.edges],
            "p_policies": None if all(p == "fail" for p in policies) else policies,
            "p_priority": params["priorities"],
            "p_run_at": [j.run_at.isoformat() if j.run_at else None for j in graph.jobs],
            "p_max_attempts": params["max_attempts"], "p_trace_context": trace_context or None}


def flow_run_from_rpc(rows: Any) -> FlowRun:
    """api.create_flow's answer: one row (flow_id, job_ids)."""
    row = rows[0]
    return FlowRun(UUID(row["flow_id"]), [UUID(i) for i in row["job_ids"]])


def state_from_rpc(rows: Any) -> JobResult | None:
    """api.job_state's answer (a list of at most one row, timestamps as strings)."""
    if not rows:
        return None
    row = dict(rows[0])
    row["completed_at"] = datetime.fromisoformat(row["completed_at"]) if row.get("completed_at") else None
    return JobResult.from_row(row)


def states_from_rpc(rows: Any) -> list[JobResult]:
    """api.flow_state's answer: one JobResult a row."""
    return [state for row in rows or [] if (state := state_from_rpc([row])) is not None]


_TIMES = ("scheduled_for", "started_at", "completed_at", "created_at", "lease_expires_at", "updated_at")


def _job(row: dict[str, Any]) -> Job:
    """A jobs row as PostgREST renders it (uuid and timestamps as strings)."""
    fields: dict[str, Any] = {name: row.get(name) for name in Job.__dataclass_fields__}
    fields["id"] = UUID(row["id"])
    for name in _TIMES:
        fields[name] = datetime.fromisoformat(row[name]) if row.get(name) else None
    return Job.from_row(fields)


def _claimed(row: dict[str, Any]) -> Claimed:
    return Claimed(UUID(row["id"]), row["type"], row["attempts"], row["max_attempts"], row["priority"],
                   row["payload"], row["idempotency_key"], row.get("trace_context"))
