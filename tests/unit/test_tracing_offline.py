"""Tracing without a database: jobkit works when opentelemetry cannot be imported at all, and over the
in-memory backend a snoozed attempt and a shutdown end their run spans with what happened."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from jobkit import tracing
from jobkit.handlers import RateLimited, Registry
from jobkit.jobs import NewJob, Status
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.drain import Drainer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

WITHOUT_OTEL = textwrap.dedent("""
    import asyncio, sys
    sys.modules["opentelemetry"] = None  # any import of it now raises ImportError
    import jobkit
    from jobkit import tracing
    from jobkit.worker.drain import Drainer

    async def main():
        jobs, backend = jobkit.Registry(), jobkit.MemoryBackend()

        @jobs.handler("t")
        def handle(payload, ctx):
            return payload * 2

        with tracing.enqueueing(["t"]) as traced:
            job_id = await backend.enqueue(jobkit.NewJob("t", 21), traced.context)
            traced.sent([job_id])
        summary = await Drainer(jobs, backend).drain("t")
        job = await backend.get(job_id)
        print(tracing.AVAILABLE, tracing.tracer(), traced.context, summary.completed, job.result,
              job.trace_context, any(m.startswith("opentelemetry.") for m in sys.modules))

    asyncio.run(main())
""")


def test_jobkit_works_when_opentelemetry_cannot_be_imported() -> None:
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None", "None", "1", "42", "None", "False"]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def _runs(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {str((s.attributes or {})["jobkit.job.id"]): s for s in exporter.get_finished_spans()
            if s.name.startswith("jobkit.run ")}


def test_a_snooze_is_no_error_and_a_shutdown_releases(spans: InMemorySpanExporter) -> None:
    jobs, backend = Registry(), MemoryBackend()
    running = asyncio.Event()

    @jobs.handler("limited")
    async def limited(payload: Any, ctx: Any) -> None:
        raise RateLimited(retry_after=timedelta(seconds=60))

    @jobs.handler("slow")
    async def slow(payload: Any, ctx: Any) -> None:
        running.set()
        await asyncio.sleep(3600)

    async def main() -> tuple[Any, Any]:
        with tracing.enqueueing(["limited"]) as traced:
            snoozed = await backend.enqueue(NewJob("limited", 1), traced.context)
        stuck = await backend.enqueue(NewJob("slow", 2))  # no trace context: under its claim
        drainer = Drainer(jobs, backend)
        assert (await drainer.drain("limited")).snoozed == 1
        drain = asyncio.ensure_future(drainer.drain("slow"))
        await running.wait()
        assert await drainer.shutdown(timedelta(seconds=0.01)) == 1
        await drain
        return snoozed, stuck

    snoozed, stuck = asyncio.run(main())
    runs = _runs(spans)
    assert runs[str(snoozed)].attributes["jobkit.job.outcome"] == "snoozed"
    assert runs[str(snoozed)].status.status_code == StatusCode.UNSET and not runs[str(snoozed)].events
    assert runs[str(stuck)].attributes["jobkit.job.outcome"] == "released"
    assert asyncio.run(backend.get(stuck)).status == Status.PENDING  # type: ignore[union-attr]
