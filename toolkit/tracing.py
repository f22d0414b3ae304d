"""Optional OpenTelemetry spans: one trace from the request that enqueued a job to its handler.

The only module that imports ``opentelemetry`` (the ``otel`` extra, the API package alone). jobkit
works without it, and with it but no TracerProvider configured, every function here returns at its
first check (is a real provider set?) and no trace context is stored on the job.

    jobkit.enqueue <type>   PRODUCER  around the enqueue statement; its context is injected through
                                      the global propagator (W3C traceparent/tracestate) into a
                                      carrier that is stored with the job (jobs.trace_context)
    jobkit.claim            CLIENT    a claim_jobs round trip that returned jobs (or failed): made
                                      after the fact, so the empty polls of a lingering drain cost
                                      nothing and make no spans
    jobkit.run <type>       CONSUMER  one attempt, from its runner picking it up until its outcome
                                      is recorded; a child of the enqueuer's span (so one trace runs
                                      from the request to the handler) with a link to its claim, or
                                      a child of its claim when the job carries no trace context.
                                      The handler runs with it as the current span (sync handlers
                                      too: their thread gets a copy of the context). A failed
                                      attempt records its exception and sets the status to ERROR;
                                      jobkit.job.outcome says what the database recorded.
    jobkit.commit           INTERNAL  a child of the run span: from the outcome handed to its group
                                      commit until the statement returned
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from .jobs import Claimed, TraceContext
from .version import __version__
from .worker.attempt import Outcome

try:
    from opentelemetry import propagate
    from opentelemetry import trace as otel
except ImportError:  # the otel extra is not installed: tracing stays off
    AVAILABLE = False
else:
    AVAILABLE = True

SYSTEM = "jobkit"
_cache: list[Any] = [None, None]  # [the provider, jobkit's tracer from it]


def tracer() -> Any:
    """jobkit's Tracer when a real TracerProvider is configured, else None (tracing is off)."""
    if not AVAILABLE:
        return None
    provider = otel.get_tracer_provider()
    if isinstance(provider, (otel.ProxyTracerProvider, otel.NoOpTracerProvider)):
        return None
    if _cache[0] is not provider:
        _cache[1] = provider.get_tracer("jobkit", __version__)
        _cache[0] = provider
    return _cache[1]


# ---- the producer ----------------------------------------------------------------------------------


class Enqueueing:
    """The enqueue span while the statement runs: ``context`` is the carrier to store with the jobs
    (None when tracing is off), ``sent(ids)`` names the jobs on the span."""

    __slots__ = ("context", "_span")

    def __init__(self, span: Any = None, context: TraceContext | None = None) -> None:
        self._span = span
        self.context = context

    def sent(self, ids: Sequence[UUID]) -> None:
        if self._span is None:
            return
        self._span.set_attribute("messaging.batch.message_count", len(ids))
        if len(ids) == 1:
            self._span.set_attribute("messaging.message.id", str(ids[0]))
            self._span.set_attribute("jobkit.job.id", str(ids[0]))


_OFF = contextlib.nullcontext(Enqueueing())


def enqueueing(job_types: Sequence[str]) -> contextlib.AbstractContextManager[Enqueueing]:
    """``with tracing.enqueueing(types) as e: ... enqueue with e.context ...; e.sent(ids)``."""
    t = tracer()
    if t is None:
        return _OFF
    return _enqueue_span(t, job_types)


@contextlib.contextmanager
def _enqueue_span(t: Any, job_types: Sequence[str]) -> Iterator[Enqueueing]:
    one = job_types[0] if job_types and all(j == job_types[0] for j in job_types) else None
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                  "messaging.operation.name": "enqueue"}
    if one is not None:
        attributes["messaging.destination.name"] = one
    name = f"jobkit.enqueue {one}" if one is not None else "jobkit.enqueue"
    with t.start_as_current_span(name, kind=otel.SpanKind.PRODUCER, attributes=attributes) as span:
        carrier: TraceContext = {}
        propagate.inject(carrier)
        yield Enqueueing(span, carrier or None)


# ---- the worker -------------------------------------------------------------------------------------


class ClaimTrace:
    """One claim_jobs round trip; its span is made when it returned jobs (or failed)."""

    __slots__ = ("tracer", "job_type", "worker", "started", "link")

    def __init__(self, t: Any, job_type: str, worker: str) -> None:
        self.tracer = t
        self.job_type = job_type
        self.worker = worker
        self.started = time.time_ns()
        self.link: Any = None  # the claim span's context, once made

    def claimed(self, jobs: Sequence[Claimed]) -> None:
        if jobs:
            self._span(len(jobs), None)

    def failed(self, error: BaseException) -> None:
        self._span(0, error)

    def job(self, job: Claimed) -> JobSpan:
        return JobSpan(self.tracer, job, self.link)

    def _span(self, count: int, error: BaseException | None) -> None:
        span = self.tracer.start_span(
            "jobkit.claim", kind=otel.SpanKind.CLIENT, start_time=self.started, attributes={
                "messaging.system": SYSTEM, "messaging.operation.type": "receive",
                "messaging.operation.name": "claim", "messaging.destination.name": self.job_type,
                "messaging.batch.message_count": count, "jobkit.worker.id": self.worker})
        if error is not None:
            span.record_exception(error)
            span.set_status(otel.Status(otel.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        self.link = span.get_span_context()


def claim_started(job_type: str, worker: str) -> ClaimTrace | None:
    """A claim is about to be sent: None when tracing is off (then nothing else here runs)."""
    t = tracer()
    return None if t is None else ClaimTrace(t, job_type, worker)


class JobSpan:
    """One attempt's run span (started when its runner picks it up) and its commit span."""

    __slots__ = ("tracer", "job", "claim", "run", "commit", "errored")

    def __init__(self, t: Any, job: Claimed, claim: Any) -> None:
        self.tracer = t
        self.job = job
        self.claim = claim
        self.run: Any = None
        self.commit: Any = None
        self.errored = False  # the handler's exception set the status (keep its description)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Start the run span and make it current while the handler runs."""
        job = self.job
        parent = _extract(job.trace_context)
        links = [otel.Link(self.claim)] if parent is not None and self.claim is not None else None
        if parent is None and self.claim is not None:
            parent = otel.set_span_in_context(otel.NonRecordingSpan(self.claim))
        self.run = self.tracer.start_span(
            f"jobkit.run {job.type}", context=parent, kind=otel.SpanKind.CONSUMER, links=links, attributes={
                "messaging.system": SYSTEM, "messaging.operation.type": "process",
                "messaging.operation.name": "run", "messaging.destination.name": job.type,
                "messaging.message.id": str(job.id), "jobkit.job.id": str(job.id),
                "jobkit.job.type": job.type, "jobkit.job.attempt": job.attempts,
                "jobkit.job.max_attempts": job.max_attempts})
        with otel.use_span(self.run, end_on_exit=False, record_exception=False,
                           set_status_on_exception=False):
            yield

    def ran(self, error: BaseException) -> None:
        """The handler ended its attempt with ``error`` (not a snooze: that is no error)."""
        if self.run is None:
            return
        self.run.record_exception(error)
        self.run.set_status(otel.Status(otel.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        self.errored = True

    def recording(self, statement: str) -> None:
        """The outcome was handed to its statement (complete_jobs, fail_jobs, snooze_job)."""
        if self.run is None or self.commit is not None:
            return
        self.commit = self.tracer.start_span(
            "jobkit.commit", context=otel.set_span_in_context(self.run),
            attributes={"messaging.system": SYSTEM, "jobkit.commit.statement": statement})

    def settled(self, outcome: Outcome, batch: int = 1) -> None:
        """The database recorded ``outcome`` (completed, retry, failed, snoozed, lost: fenced out,
        unrecorded: the statement failed, released: shutdown) in a statement of ``batch`` jobs."""
        if self.commit is not None:
            self.commit.set_attribute("jobkit.commit.batch_size", batch)
            self.commit.set_attribute("jobkit.job.outcome", outcome.value)
            if outcome.failed:
                self.commit.set_status(otel.Status(otel.StatusCode.ERROR, outcome.value))
            self.commit.end()
            self.commit = None
        if self.run is not None:
            self.run.set_attribute("jobkit.job.outcome", outcome.value)
            if outcome.failed and not self.errored:
                self.run.set_status(otel.Status(otel.StatusCode.ERROR, f"attempt {outcome.value}"))
            self.run.end()
            self.run = None


def running(span: JobSpan | None) -> contextlib.AbstractContextManager[None]:
    """``span.running()``, or nothing when the job is not traced."""
    return contextlib.nullcontext() if span is None else span.running()


def _extract(carrier: TraceContext | None) -> Any:
    """The enqueuer's context from its carrier, or None when it holds no valid span."""
    if not carrier:
        return None
    context = propagate.extract(carrier)
    return context if otel.get_current_span(context).get_span_context().is_valid else None
