"""jobkit.wait on a flow (issue 25, item 7): ``jobkit.wait(target, run)`` with the FlowRun
jobkit.flow() returned, and ``jobkit.wait_flow(target, id)``, return a FlowResult once every job of
the flow ended (a failed job reported, not raised), raise WaitTimeout naming the jobs not ended, and
NotFound for a flow id no job has. On a URL the waiter registers the flow's jobs (wait_on) and is
woken by the notifications their endings send; on a connection it polls flow_state."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import jobkit
import psycopg
import pytest
from jobkit import flowwait
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, NotFound, WaitTimeout
from jobkit.jobs import Failure, FlowResult, Status
from jobkit.lifecycle import Lifecycle
from poll import wait_for

LEASE = timedelta(minutes=5)


def _run_ready(life: Lifecycle, job_type: str, fail: bool = False) -> list[UUID]:
    """Claim every due job of the type and complete it (result: its payload) or fail it for good."""
    claimed = life.claim(job_type, 100, "test-worker", LEASE)
    if fail:
        life.fail([Failure(c.id, c.attempts, "boom: the card was declined", permanent=True) for c in claimed])
    elif claimed:
        life.complete([(c.id, c.attempts, json.dumps(c.payload)) for c in claimed])
    return [c.id for c in claimed]


def _waiting(db_url: str) -> set[UUID]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("select job_id from jobkit.waiters")}


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as e:  # handed to the test's thread
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _diamond(target: Any) -> tuple[jobkit.FlowRun, list[jobkit.FlowJob]]:
    graph = jobkit.Flow("diamond")
    a = graph.add("dw.a", {"n": 1})
    b = graph.add("dw.b", {"n": 2}, after=[a])
    c = graph.add("dw.c", {"n": 3}, after=[a])
    d = graph.add("dw.d", {"n": 4}, after=[b, c])
    return jobkit.flow(target, graph), [a, b, c, d]


def test_a_diamond_waited_on_completes_woken_by_its_jobs_endings(
        db_url: str, session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiter registers every job of the flow (the blocked ones too) and is woken by their
    endings alone: its re-reads are pushed past the timeout, so without the notifications this
    wait would raise WaitTimeout."""
    monkeypatch.setattr(flowwait, "FIRST_POLL", 3600.0)
    monkeypatch.setattr(flowwait, "LISTENING_POLL", 3600.0)
    life = Lifecycle(session)
    run, (a, b, c, d) = _diamond(session)
    thread, out = _in_thread(lambda: jobkit.wait(db_url, run, timeout=60))
    wait_for(lambda: _waiting(db_url) == set(run.job_ids), 20, "wait() registered the flow's 4 jobs")
    for job_type in ("dw.a", "dw.b", "dw.c", "dw.d"):
        assert len(_run_ready(life, job_type)) == 1
    thread.join(60)
    [done] = out
    assert isinstance(done, FlowResult), done
    assert done.id == run.id and [j.id for j in done.jobs] == run.job_ids
    assert [(j.status, j.result) for j in done.jobs] == [(Status.COMPLETED, {"n": n}) for n in (1, 2, 3, 4)]
    assert done.ok and done.counts == {"succeeded": 4, "failed": 0} and done.failed == []
    assert done[run[d]].result == {"n": 4} and done[str(run[a])].attempts == 1
    assert _waiting(db_url) == set()  # each ending deleted its registration
    again = jobkit.wait_flow(db_url, run.id, timeout=0)  # ended: no waiting, by the bare id too
    assert again == done and jobkit.wait_flow(db_url, str(run.id), timeout=0) == done


def test_a_flow_with_a_failing_job_returns_with_the_failure_reported(db_url: str, session: Session) -> None:
    """A failed parent fails its 'fail' child and releases its 'run' child: the wait (on the
    caller's own connection: polled) returns once all three ended, the failures in ``failed``."""
    life = Lifecycle(session)
    graph = jobkit.Flow("order")
    charge = graph.add("fw.charge", {"order": 7})
    ship = graph.add("fw.ship", {"order": 7}, after=[charge])
    tidy = graph.add("fw.tidy", {"order": 7}, after=[charge], on_parent_failure="run")
    run = jobkit.flow(session, graph)
    with Database(db_url).session() as mine:
        with pytest.raises(WaitTimeout):
            jobkit.wait(mine, run, timeout=0)
        thread, out = _in_thread(lambda: jobkit.wait(mine, run, timeout=60, poll=0.05))
        _run_ready(life, "fw.charge", fail=True)
        wait_for(lambda: _run_ready(life, "fw.tidy") != [], 20, "the 'run' child was released and ran")
        thread.join(60)
    [done] = out
    assert isinstance(done, FlowResult), done
    assert not done.ok and done.counts == {"succeeded": 1, "failed": 2}
    assert [j.id for j in done.failed] == [run[charge], run[ship]] and [j.id for j in done.succeeded] == [run[tidy]]
    assert done[run[charge]].status == Status.FAILED and done[run[charge]].error == "boom: the card was declined"
    assert done[run[ship]].status == Status.FAILED and "on_parent_failure = fail" in (done[run[ship]].error or "")
    assert done[run[tidy]].result == {"order": 7}


def test_a_cancelled_flow_ends_the_wait_too(db_url: str, session: Session) -> None:
    run, _handles = _diamond(session)
    thread, out = _in_thread(lambda: asyncio.run(jobkit.wait_async(db_url, run, timeout=60)))
    wait_for(lambda: _waiting(db_url) == set(run.job_ids), 20, "wait_async() registered the flow's jobs")
    assert session.scalar("select jobkit.cancel_flow(%s)", (run.id,)) == 4
    thread.join(60)
    [done] = out
    assert isinstance(done, FlowResult), done
    assert [j.status for j in done.jobs] == [Status.CANCELLED] * 4 and done.counts["failed"] == 4


def test_the_wait_times_out_naming_the_jobs_not_ended(db_url: str, session: Session) -> None:
    life = Lifecycle(session)
    run, (a, b, c, d) = _diamond(session)
    _run_ready(life, "dw.a")
    with pytest.raises(WaitTimeout) as caught:
        jobkit.wait(db_url, run, timeout=0.3)
    error = caught.value
    assert error.flow_id == run.id and error.open_jobs == {
        run[b]: "pending", run[c]: "pending", run[d]: "blocked"}
    assert error.message == (
        f"flow {run.id} did not finish within 0.3s (3 of 4 jobs not ended: 1 blocked, 2 pending)")
    assert error.hint and f"jobkit flows show {run.id}" in error.hint
    with pytest.raises(WaitTimeout, match="3 of 4 jobs not ended"):
        asyncio.run(jobkit.wait_flow_async(db_url, run.id, timeout=0.2, listen=False))
    with pytest.raises(WaitTimeout, match="3 of 4 jobs not ended"):
        jobkit.wait(session, run, timeout=0.1, poll=0.05)


def test_an_unknown_flow_and_bad_arguments_are_one_line_errors(db_url: str, session: Session) -> None:
    unknown = uuid.uuid4()
    with pytest.raises(NotFound) as caught:
        jobkit.wait_flow(db_url, unknown, timeout=5)
    assert caught.value.message == f"no flow {unknown}: no job has that flow id" and "\n" not in str(caught.value)
    assert caught.value.hint and "FlowRun" in caught.value.hint
    with pytest.raises(NotFound, match="no flow"):
        asyncio.run(jobkit.wait_flow_async(db_url, unknown, timeout=5))
    with pytest.raises(ConfigError, match="not a flow id: 'abc'"):
        jobkit.wait_flow(db_url, "abc")
    run, _handles = _diamond(session)
    with pytest.raises(ConfigError, match="on_progress is for a wait on one job"):
        jobkit.wait(db_url, run, on_progress=print)
    with pytest.raises(ConfigError, match="timeout must be >= 0"):
        jobkit.wait(db_url, run, timeout=-1)
    with pytest.raises(ConfigError, match="listen=True needs a database URL"):
        jobkit.wait_flow(session, run, listen=True)
    assert _waiting(db_url) == set()  # nothing was registered by a refused wait


def test_flow_state_reads_results_only_once_every_job_ended(session: Session) -> None:
    life = Lifecycle(session)
    run, _handles = _diamond(session)
    _run_ready(life, "dw.a")
    states = life.flow_state(run.id)
    assert [(s.id, s.status.value, s.result) for s in states] == [
        (run.job_ids[0], "completed", None), (run.job_ids[1], "pending", None),
        (run.job_ids[2], "pending", None), (run.job_ids[3], "blocked", None)]
    for job_type in ("dw.b", "dw.c", "dw.d"):
        _run_ready(life, job_type)
    assert [s.result for s in life.flow_state(run.id)] == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]
    assert life.flow_state(uuid.uuid4()) == []
