"""Job graphs: build a :class:`Flow` (jobs with ``after=[...]`` parents) and insert it whole with
:func:`flow`, in one transaction; or fan out with :func:`gather` and a callback that runs when every
job of the batch ended.

A child waits in the ``blocked`` state until its parents end. A completed parent releases it; a
parent that fails or is cancelled applies the edge's ``on_parent_failure``: ``"fail"`` (the child
fails, the default), ``"cancel"`` (it is cancelled) or ``"run"`` (it runs anyway once its other
parents ended: callbacks, cleanups). The database does this in the parent's own finishing
statement, and a sweep (the stuck sweep's backstop) catches any child left behind. Children read
their parents' results with ``ctx.parents()``; a gather callback its summary with ``ctx.gathered()``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, overload

from . import tracing
from .exceptions import ConfigError
from .jobs import FlowRun, Gathered, NewJob, Parent, gathered
from .lifecycle import flow_params

__all__ = ["Edge", "Flow", "FlowJob", "FlowRun", "Gathered", "Parent", "flow", "flow_params", "gather",
           "gather_graph", "gathered"]

Policy = Literal["fail", "cancel", "run"]
POLICIES: tuple[str, ...] = ("fail", "cancel", "run")
MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class FlowJob:
    """A job of a :class:`Flow` before it is inserted: name it in another job's ``after=``."""

    flow: int  # the id() of the Flow it belongs to, so a handle of another flow is refused
    position: int  # 0-based, in the order the jobs were added
    type: str


@dataclass(frozen=True, slots=True)
class Edge:
    parent: int
    child: int
    policy: str


class FanInEdges(Sequence[Edge]):
    """A gather's edges, made when read: each of the first ``n`` jobs to the last, ``"run"``. The
    PostgreSQL backend sends none of them (create_flow's p_fan_in), so a gather builds none."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> Edge: ...
    @overload
    def __getitem__(self, i: slice) -> list[Edge]: ...
    def __getitem__(self, i: int | slice) -> Edge | list[Edge]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        k = i + self.n if i < 0 else i
        if not 0 <= k < self.n:
            raise IndexError(i)
        return Edge(k, self.n, "run")


class Flow:
    """A graph of jobs to insert in one transaction with :func:`flow`. Add each job after its
    parents (``after=``): a graph built so cannot have a cycle."""

    def __init__(self, name: str | None = None) -> None:
        if name is not None and not 1 <= len(name) <= MAX_NAME:
            raise ConfigError(f"a flow's name must be 1 to {MAX_NAME} characters, got {len(name)}")
        self.name = name
        self.jobs: list[NewJob] = []
        self.edges: list[Edge] | FanInEdges = []
        self.fan_in = False  # a gather's graph: the last job is after all the others (gather_graph)

    def add(self, job_type: str, payload: Any = None, *, after: Iterable[FlowJob | tuple[FlowJob, str]] = (),
            on_parent_failure: str = "fail", priority: int = 0, run_at: datetime | None = None,
            delay: timedelta | float | None = None, max_attempts: int | None = None) -> FlowJob:
        """Add a job; it runs when every job of ``after`` ended (each may be ``(job, policy)`` to
        give that edge its own policy). ``on_parent_failure``: what a failed or cancelled parent
        does to it, ``"fail"``, ``"cancel"`` or ``"run"``."""
        from .enqueue import new_job  # the one place a job is checked

        if self.fan_in or not isinstance(self.edges, list):
            raise ConfigError("a gather's graph takes no more jobs: its callback is after all of them",
                              hint="build a jobkit.Flow with flow.add(...) for another shape")
        job = new_job(job_type, {} if payload is None else payload, priority=priority, run_at=run_at,
                      delay=delay, max_attempts=max_attempts)
        handle = FlowJob(id(self), len(self.jobs), job_type)
        edges = [self._edge(item, handle, on_parent_failure) for item in after]
        if len({e.parent for e in edges}) != len(edges):
            raise ConfigError(f"the {job_type} job names a parent twice in after=",
                              hint="list each parent once")
        self.jobs.append(job)
        self.edges.extend(edges)
        return handle

    def _edge(self, item: FlowJob | tuple[FlowJob, str], child: FlowJob, default: str) -> Edge:
        parent, policy = item if isinstance(item, tuple) else (item, default)
        if policy not in POLICIES:
            raise ConfigError(f"on_parent_failure must be one of {', '.join(POLICIES)}, got {policy!r}",
                              hint='"fail" (default), "cancel" or "run"')
        if not isinstance(parent, FlowJob) or parent.flow != id(self) or parent.position >= len(self.jobs):
            raise ConfigError(f"after= of the {child.type} job names {parent!r}, "
                              "not a job added to this flow",
                              hint="pass the handles flow.add() returned, each added before its children")
        return Edge(parent.position, child.position, policy)


def flow(target: Any, graph: Flow, *, schema: str = "jobkit", api_schema: str = "jobkit_api") -> FlowRun:
    """Insert ``graph`` in one transaction (on your own connection: in your transaction). Returns
    its id and its jobs' ids."""
    from .enqueue import _is_supabase, _session
    from .lifecycle import Statements

    flow_params(graph)  # checked before anything is sent
    with tracing.enqueueing(sorted({j.type for j in graph.jobs})) as traced:
        if _is_supabase(target):
            from .worker.backends.supabase import create_flow_body, flow_run_from_rpc

            body = create_flow_body(graph, traced.context)
            run = flow_run_from_rpc(target.schema(api_schema).rpc("create_flow", body).execute().data)
        else:
            with _session(target) as session:
                run = session.run(Statements(schema).create_flow(graph, traced.context))
        traced.sent(run.job_ids)
    return run


def gather(target: Any, jobs: Sequence[NewJob], then: NewJob, *, name: str | None = None,
           schema: str = "jobkit", api_schema: str = "jobkit_api") -> FlowRun:
    """Fan out ``jobs`` and fan in to ``then``, a callback job that runs once every one of them
    ended, whether it succeeded or not (its edges are ``"run"``); it reads what succeeded and what
    failed with ``ctx.gathered()``. The callback's id is the last of ``FlowRun.job_ids``."""
    return flow(target, gather_graph(jobs, then, name), schema=schema, api_schema=api_schema)


def gather_graph(jobs: Sequence[NewJob], then: NewJob, name: str | None = None) -> Flow:
    """The graph :func:`gather` inserts: the jobs, then the callback after all of them ("run" edges).
    Built directly rather than by ``Flow.add`` (which checks each edge's handle, one by one): each
    job is checked once, as ``enqueue_many`` checks it, and the edges are known to be well formed."""
    from .enqueue import _delta, check_job

    def flow_job(job: NewJob) -> NewJob:  # the job Flow.add would store (a flow's jobs take no keys)
        if not isinstance(job, NewJob):
            raise ConfigError(f"each job to gather must be a jobkit.NewJob, got {job!r}",
                              hint="build each one with jobkit.NewJob(type, payload)")
        return check_job(NewJob(job.type, {} if job.payload is None else job.payload, job.priority or 0,
                                job.run_at, job.max_attempts, None, _delta(job.delay)))

    graph = Flow(name)
    graph.jobs = [flow_job(j) for j in jobs] + [flow_job(then)]
    n = len(jobs)
    graph.edges = FanInEdges(n)
    graph.fan_in = True  # the database stores a counter for these edges, not the edges (create_flow p_fan_in)
    return graph

