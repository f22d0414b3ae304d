"""OpenTelemetry tracing against the real database: one trace from the span that enqueued a job to its
handler's span, a failed attempt's exception and retry on its span, nothing stored (and no span)
without a TracerProvider; and migration 0004 upgrading a database in place (old calls, grants, jobs).

The TracerProvider is the SDK's with an in-memory exporter. OpenTelemetry sets its global provider
only once per process, so the fixture hands it to jobkit by patching ``get_tracer_provider`` for the
test alone: every other test runs untraced, as it did."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import jobkit
import pytest
from jobkit import tracing
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prerecut import deploy_prerecut


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def _drain(db_url: str, registry: Registry, job_type: str) -> DrainSummary:
    async def main() -> DrainSummary:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(registry, backend, concurrency=4).drain(job_type)
        finally:
            await backend.close()

    return asyncio.run(main())


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _trace_context(session: Session, job_id: Any) -> Any:
    return session.scalar("select trace_context from jobkit.jobs where id = %s", (job_id,))


def test_one_trace_runs_from_the_enqueuing_request_to_the_handler(
        db_url: str, session: Session, spans: InMemorySpanExporter) -> None:
    seen: dict[str, Any] = {}
    jobs = Registry()

    @jobs.handler("email")
    async def email(payload: Any, ctx: Any) -> str:
        with trace.get_tracer("app").start_as_current_span("send"):
            seen[payload["to"]] = trace.get_current_span().get_span_context()
        return "sent"

    @jobs.handler("report")
    def report(payload: Any, ctx: Any) -> str:  # a sync handler: its thread sees the run span too
        seen["report"] = (trace.get_current_span().get_span_context(), threading.current_thread().name)
        return "done"

    app = trace.get_tracer_provider().get_tracer("app")
    with app.start_as_current_span("POST /signup", kind=SpanKind.SERVER) as request:
        one = jobkit.enqueue(db_url, "email", {"to": "a"})
        many = jobkit.enqueue_many(db_url, [NewJob("email", {"to": "b"}), NewJob("report", {})])
    trace_id = request.get_span_context().trace_id
    stored = _trace_context(session, one)
    assert stored["traceparent"].split("-")[1] == f"{trace_id:032x}"
    assert _trace_context(session, many[0]) == _trace_context(session, many[1]) != stored  # one per call

    assert _drain(db_url, jobs, "email").completed == 2
    assert _drain(db_url, jobs, "report").completed == 1

    single, batch = _named(spans, "jobkit.enqueue email"), _named(spans, "jobkit.enqueue")
    assert len(single) == 1 and len(batch) == 1
    assert single[0].kind == SpanKind.PRODUCER and _parent_of(single[0]) == request.get_span_context().span_id
    assert single[0].attributes is not None and single[0].attributes["jobkit.job.id"] == str(one)
    assert batch[0].attributes is not None and batch[0].attributes["messaging.batch.message_count"] == 2
    runs = {s.attributes["jobkit.job.id"]: s for s in spans.get_finished_spans()  # type: ignore[index]
            if s.name.startswith("jobkit.run ")}
    assert set(runs) == {str(one), str(many[0]), str(many[1])}
    run = runs[str(one)]
    assert run.kind == SpanKind.CONSUMER and run.name == "jobkit.run email"
    assert run.context.trace_id == trace_id and _parent_of(run) == single[0].context.span_id
    assert runs[str(many[1])].context.trace_id == trace_id == runs[str(many[0])].context.trace_id
    assert _parent_of(runs[str(many[0])]) == batch[0].context.span_id
    assert dict(run.attributes or {}).items() >= {
        "messaging.system": "jobkit", "jobkit.job.type": "email", "jobkit.job.attempt": 1,
        "jobkit.job.outcome": "completed"}.items()
    assert run.status.status_code == StatusCode.UNSET
    claims = _named(spans, "jobkit.claim")
    assert claims and all(c.kind == SpanKind.CLIENT for c in claims)
    assert [link.context.span_id for link in run.links] == [
        c.context.span_id for c in claims if c.attributes and c.attributes["messaging.destination.name"] == "email"]
    # The handler's own spans are children of its run span; so is the commit of its outcome.
    [send] = [s for s in _named(spans, "send") if s.context.span_id == seen["a"].span_id]
    assert _parent_of(send) == run.context.span_id and send.context.trace_id == trace_id
    commits = [c for c in _named(spans, "jobkit.commit") if _parent_of(c) == run.context.span_id]
    assert len(commits) == 1 and commits[0].attributes is not None
    assert commits[0].attributes["jobkit.commit.statement"] == "complete_jobs"
    report_ctx, thread = seen["report"]
    assert report_ctx.span_id == runs[str(many[1])].context.span_id and thread.startswith("jobkit-job")


def test_a_failed_attempt_records_its_exception_and_the_retry(
        db_url: str, session: Session, spans: InMemorySpanExporter) -> None:
    jobs = Registry()

    @jobs.handler("flaky")
    async def flaky(payload: Any, ctx: Any) -> None:
        raise ValueError(f"boom {payload}")

    again = jobkit.enqueue(db_url, "flaky", 1)
    last = jobkit.enqueue(db_url, "flaky", 2, max_attempts=1)
    assert _drain(db_url, jobs, "flaky").failed == 2
    assert session.scalar("select status from jobkit.jobs where id = %s", (again,)) == "pending"
    assert session.scalar("select status from jobkit.jobs where id = %s", (last,)) == "failed"
    runs = {s.attributes["jobkit.job.id"]: s for s in _named(spans, "jobkit.run flaky")}  # type: ignore[index]
    for job_id, outcome, text in ((again, "retry", "boom 1"), (last, "failed", "boom 2")):
        run = runs[str(job_id)]
        assert run.attributes is not None and run.attributes["jobkit.job.outcome"] == outcome
        assert run.status.status_code == StatusCode.ERROR and run.status.description == f"ValueError: {text}"
        [event] = [e for e in run.events if e.name == "exception"]
        assert event.attributes is not None
        assert (event.attributes["exception.type"], event.attributes["exception.message"]) == ("ValueError", text)
        # The run span continues the enqueue span's trace even without a surrounding request span.
        [enqueued] = [s for s in _named(spans, "jobkit.enqueue flaky")
                      if s.attributes and s.attributes["jobkit.job.id"] == str(job_id)]
        assert _parent_of(run) == enqueued.context.span_id
    commits = [c for c in _named(spans, "jobkit.commit") if c.attributes and c.attributes["jobkit.job.outcome"] == "failed"]
    assert len(commits) == 1 and commits[0].status.status_code == StatusCode.ERROR


def test_without_a_tracer_provider_no_trace_context_is_stored(db_url: str, session: Session) -> None:
    assert tracing.tracer() is None  # nothing configured: the API's proxy provider
    with trace.get_tracer("app").start_as_current_span("POST /signup"):  # a no-op span
        one = jobkit.enqueue(db_url, "plain", {})
        many = jobkit.enqueue_many(db_url, [NewJob("plain", 1), NewJob("plain", 2)])
        later = asyncio.run(jobkit.enqueue_async(db_url, "plain", 3))
    ids = [str(one), *map(str, many), str(later)]
    rows = session.all("select id::text, trace_context from jobkit.jobs where id::text = any(%s)", (ids,))
    assert len(rows) == 4 and all(r["trace_context"] is None for r in rows)
    jobs = Registry()
    contexts: list[Any] = []

    @jobs.handler("plain")
    async def plain(payload: Any, ctx: Any) -> None:
        contexts.append((ctx.job.trace_context, trace.get_current_span().get_span_context().is_valid))

    assert _drain(db_url, jobs, "plain").completed == 4
    assert contexts == [(None, False)] * 4


def test_a_job_enqueued_from_sql_gets_a_run_span_under_its_claim(
        db_url: str, session: Session, spans: InMemorySpanExporter) -> None:
    job_id = session.scalar("select jobkit.enqueue('sql', '{}')")
    jobs = Registry()
    jobs.handler("sql")(lambda payload, ctx: None)
    assert _drain(db_url, jobs, "sql").completed == 1
    [run], [claim] = _named(spans, "jobkit.run sql"), _named(spans, "jobkit.claim")
    assert run.attributes is not None and run.attributes["jobkit.job.id"] == str(job_id)
    assert _parent_of(run) == claim.context.span_id and run.context.trace_id == claim.context.trace_id
    assert run.links == () or list(run.links) == []


def test_migration_0004_keeps_old_calls_grants_and_jobs(
        fresh_db: str, admin: Session) -> None:
    """A database deployed before 0004, with a job waiting and a role of the user's own allowed to
    enqueue, upgrades in place: the old calls work, the grant holds, the waiting job is claimed."""
    quiet: dict[str, Callable[[str], None]] = {"echo": lambda _m: None}
    deploy_prerecut(fresh_db, through="0003")  # 0001..0003 as they were deployed, with their functions
    role = "jobkit_0004_app"
    admin.execute_with_identifiers("drop role if exists {r}", r=role)
    admin.execute_with_identifiers("create role {r} nologin", r=role)
    try:
        with Database(fresh_db).session() as s:
            s.execute_with_identifiers("grant usage on schema jobkit to {r}", r=role)
            s.execute_with_identifiers(
                "grant execute on function jobkit.enqueue(text, jsonb, int, timestamptz, int, text) to {r}", r=role)
            waiting = s.scalar("select jobkit.enqueue('t', '{\"n\": 1}', 0, now(), null, 'k')")
        report = deploy(Database(fresh_db), Settings(db_url=fresh_db), DeployOptions(schedules=False), **quiet)
        assert "0004_trace_context" in report.applied
        with Database(fresh_db).session() as s:
            # carried over by 0004 and again by 0005 (which adds the concurrency parameters)
            assert s.scalar("select has_function_privilege(%s, 'jobkit.enqueue(text, jsonb, int, timestamptz, "
                            "int, text, jsonb, text, interval, interval)', 'execute')", (role,)) is True
            assert s.scalar("select count(*) from pg_proc where proname = 'enqueue' "
                            "and pronamespace = 'jobkit'::regnamespace") == 1
            # The old calls, positional and named, mean what they meant (the key finds the waiting job).
            assert s.scalar("select jobkit.enqueue('t', '{\"n\": 1}', 0, now(), null, 'k')") == waiting
            named = s.scalar("select jobkit.enqueue(p_type => 't', p_payload => '{}', p_priority => 5)")
            ids = [r["id"] for r in s.all("select id from jobkit.enqueue_many(array['t'], array['{}'::jsonb])")]
            claimed = Lifecycle(s).claim("t", 10, "w", timedelta(seconds=30))
        assert {c.id for c in claimed} == {waiting, named, *ids}
        assert all(c.trace_context is None for c in claimed)
    finally:
        with Database(fresh_db).session() as s:
            s.execute_with_identifiers("revoke all on schema jobkit from {r}", r=role)
            s.execute_with_identifiers("revoke all on all functions in schema jobkit from {r}", r=role)
        admin.execute_with_identifiers("drop role {r}", r=role)


def test_debounced_and_throttled_jobs_carry_the_latest_enqueuers_trace(
    db_url: str, session: Session, spans: InMemorySpanExporter
) -> None:
    """A debounced job takes the last enqueuer's payload and trace; a throttled one keeps its first
    enqueuer's (later calls get its id back and change nothing)."""
    app = trace.get_tracer_provider().get_tracer("app")
    ids: dict[str, list[Any]] = {"debounce": [], "throttle": []}
    traces: list[int] = []
    for n in range(2):
        with app.start_as_current_span(f"request {n}") as request:
            traces.append(request.get_span_context().trace_id)
            ids["debounce"].append(jobkit.enqueue(db_url, "email", {"n": n}, concurrency_key="k",
                                                  debounce="30s"))
            ids["throttle"].append(jobkit.enqueue(db_url, "report", {"n": n}, concurrency_key="k",
                                                  throttle="1m"))
    assert ids["debounce"][0] == ids["debounce"][1] and ids["throttle"][0] == ids["throttle"][1]
    debounced, throttled = _trace_context(session, ids["debounce"][0]), _trace_context(session, ids["throttle"][0])
    assert debounced["traceparent"].split("-")[1] == f"{traces[1]:032x}"
    assert throttled["traceparent"].split("-")[1] == f"{traces[0]:032x}"
