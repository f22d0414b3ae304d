"""gather_graph builds a gather's Flow directly (each job checked once, its edges made when read):
it must be the graph that Flow.add would build, job for job and edge for edge, refuse what Flow.add
refuses, and take no more jobs afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jobkit
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.flows import Edge, Flow, gather_graph
from jobkit.jobs import NewJob
from jobkit.lifecycle import flow_params

payloads = st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.integers())
jobs = st.builds(NewJob, st.sampled_from(["a", "b.c"]), payloads,
                 priority=st.one_of(st.none(), st.integers(-5, 5)),
                 run_at=st.one_of(st.none(), st.just(datetime(2030, 1, 1, tzinfo=UTC))),
                 max_attempts=st.one_of(st.none(), st.integers(1, 9)),
                 delay=st.one_of(st.none(), st.just(timedelta(seconds=3))))


def _by_add(items: list[NewJob], then: NewJob) -> Flow:
    graph = Flow("g")
    handles = [graph.add(j.type, j.payload, priority=j.priority or 0, run_at=j.run_at, delay=j.delay,
                         max_attempts=j.max_attempts) for j in items]
    graph.add(then.type, then.payload, after=handles, on_parent_failure="run", priority=then.priority or 0,
              run_at=then.run_at, delay=then.delay, max_attempts=then.max_attempts)
    return graph


def _rest(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters but the edges, JSON wrappers (psycopg's Jsonb) by their content."""
    return {k: getattr(v, "obj", v) for k, v in params.items() if k not in ("parents", "children", "policies", "fan_in")}


@given(st.lists(jobs, max_size=20), jobs)
def test_it_is_the_graph_flow_add_builds(items: list[NewJob], then: NewJob) -> None:
    fast, slow = gather_graph(items, then, "g"), _by_add(items, then)
    assert fast.jobs == slow.jobs and fast.name == slow.name
    assert list(fast.edges) == slow.edges and len(fast.edges) == len(items)
    if items:
        assert fast.edges[-1] == Edge(len(items) - 1, len(items), "run") and fast.edges[1:2] == slow.edges[1:2]
    sent = flow_params(fast)
    assert sent["parents"] == [] and sent["children"] == [] and sent["fan_in"] is True  # a counter, no edges
    assert _rest(sent) == _rest(flow_params(slow))


def test_it_refuses_what_flow_add_refuses_and_takes_no_more_jobs() -> None:
    with pytest.raises(jobkit.JobkitError, match="NewJob"):
        gather_graph([{"type": "a"}], NewJob("b", {}))  # type: ignore[list-item]
    with pytest.raises(jobkit.JobkitError, match="priority"):
        gather_graph([NewJob("a", {}, priority=2**40)], NewJob("b", {}))
    graph = gather_graph([NewJob("a", {})], NewJob("b", {}))
    with pytest.raises(jobkit.JobkitError, match="takes no more jobs"):
        graph.add("c", {})
    with pytest.raises(IndexError):
        graph.edges[1]
