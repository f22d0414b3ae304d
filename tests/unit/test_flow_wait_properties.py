"""Property-based, jobkit.wait on a flow (no database: the memory backend, held to the same
conformance suite as PostgreSQL): whatever the graph, its policies and which jobs fail, once every
runnable job ran the wait returns at once with every job ended, in the flow's order, each counted
once as succeeded or failed; while a job is open a wait with no time left raises WaitTimeout naming
exactly the open jobs. Any flow id argument is a flow id or one ConfigError."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.exceptions import ConfigError, WaitTimeout
from jobkit.flows import Flow
from jobkit.flowwait import flow_id
from jobkit.jobs import Failure, FlowResult, Status
from jobkit.results import wait_async, wait_flow_async
from jobkit.worker.backends.memory import MemoryBackend

POLICY = st.sampled_from(["fail", "cancel", "run"])


@st.composite
def graphs(draw: st.DrawFn) -> tuple[Flow, set[int]]:
    """A graph of 1 to 8 jobs, each after a random set of earlier ones with random policies, and
    the positions of the jobs that fail when they run."""
    n = draw(st.integers(1, 8))
    graph = Flow("prop")
    handles = []
    for i in range(n):
        parents = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        after = [(handles[p], draw(POLICY)) for p in sorted(parents)]
        handles.append(graph.add("prop.job", {"i": i}, after=after))
    return graph, draw(st.sets(st.integers(0, n - 1)))


async def _run_all(b: MemoryBackend, failing: set[int]) -> None:
    """Claim and finish every due job until none is left: complete it, or fail it for good."""
    while claimed := await b.claim("prop.job", 100, "w", timedelta(minutes=1)):
        bad = [c for c in claimed if c.payload["i"] in failing]
        good = [c for c in claimed if c not in bad]
        if good:
            await b.complete([(c.id, c.attempts, json.dumps(c.payload)) for c in good])
        if bad:
            await b.fail([Failure(c.id, c.attempts, f"job {c.payload['i']} failed", permanent=True) for c in bad])


@given(graphs())
def test_a_flow_run_to_its_end_is_waited_on_at_once_and_counted_once(drawn: tuple[Flow, set[int]]) -> None:
    graph, failing = drawn

    async def body() -> FlowResult:
        b = MemoryBackend()
        run = await b.create_flow(graph)
        opened = [j for j in await b.flow_state(run.id) if not j.finished]
        if opened:  # before anything ran, no time left: the open jobs are named
            with pytest.raises(WaitTimeout) as caught:
                await wait_async(b, run, timeout=0)
            assert caught.value.open_jobs == {j.id: j.status.value for j in opened}
        await _run_all(b, failing)
        done = await wait_flow_async(b, run.id, timeout=0)
        assert [j.id for j in done.jobs] == run.job_ids
        return done

    done = asyncio.run(body())
    assert all(j.finished for j in done.jobs)  # no job of any graph is left blocked
    assert sorted(j.id for j in done.succeeded + done.failed) == sorted(j.id for j in done.jobs)
    assert done.counts == {"succeeded": len(done.succeeded), "failed": len(done.failed)}
    assert done.ok == (not done.failed)
    assert all(j.result == {"i": i} for i, j in enumerate(done.jobs) if j.status == Status.COMPLETED)
    ran_and_failed = {j.error for j in done.failed if j.error and j.error.startswith("job ")}
    assert ran_and_failed <= {f"job {i} failed" for i in failing}


@given(st.one_of(st.text(max_size=40), st.uuids(), st.uuids().map(str), st.integers(), st.none()))
def test_any_flow_id_argument_is_a_flow_id_or_one_config_error(value: Any) -> None:
    try:
        parsed = flow_id(value)
    except ConfigError as e:
        assert e.hint and "\n" not in e.message
        return
    assert parsed == uuid.UUID(str(value))
