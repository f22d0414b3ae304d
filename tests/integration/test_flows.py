"""Job graphs on PostgreSQL (issue 25, items 4-6): a diamond, a chain of 100, a fan-out of 10,000 with a
fan-in callback, a parent failing under each policy, a flow cancelled and paused mid-way, the sweep
that settles what a path missed, and replay from a step. Jobs are run by claiming and finishing them
through the lifecycle (the worker's own statements); ctx.parents / ctx.gathered run through the real
Drainer. Every test ends by asserting, by query, that no job is left blocked or waiting forever."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any
from uuid import UUID

import jobkit
import pytest
from jobkit.connector import Session
from jobkit.exceptions import DatabaseError
from jobkit.handlers import Registry
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle, Statements
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer

LEASE = timedelta(minutes=5)
ENDED = ("completed", "failed", "dead", "cancelled")


def _run_ready(life: Lifecycle, job_type: str, *, fail: set[UUID] | None = None, limit: int = 5000) -> list[UUID]:
    """Claim every due job of the type and finish it: complete (result = its payload), or fail it
    permanently when its id is in ``fail``. Returns the ids it ran."""
    claimed = life.claim(job_type, limit, "test-worker", LEASE)
    failing = [c for c in claimed if fail and c.id in fail]
    done = [(c.id, c.attempts, json.dumps(c.payload)) for c in claimed if c not in failing]
    if done:
        life.complete(done)
    if failing:
        life.fail([Failure(c.id, c.attempts, "boom", permanent=True) for c in failing])
    return [c.id for c in claimed]


def _status(session: Session, ids: list[UUID]) -> list[str]:
    rows = {r["id"]: r["status"] for r in session.all(
        "select id, status from jobkit.jobs where id = any(%s)", (ids,))}
    return [rows[i] for i in ids]


def _nothing_stuck(session: Session, flow_id: UUID) -> None:
    """No job of the flow is blocked or waiting with nothing left that could release it: every
    blocked job has a parent that has not ended (and its flow is not paused), and none waits."""
    stuck = session.all(
        "select c.id, c.status, c.blocked_by from jobkit.jobs c join jobkit.flows f on f.id = c.flow_id "
        "where c.flow_id = %s and ((c.status = 'blocked' and (f.paused_at is null) and not exists ("
        "  select 1 from jobkit.job_parents(c.id) p"
        "  where p.status not in ('completed', 'failed', 'dead', 'cancelled')))"
        " or c.status = 'waiting')", (flow_id,))
    assert stuck == []


def _all_ended(session: Session, flow_id: UUID) -> dict[str, int]:
    rows = session.all("select status, count(*)::int as n from jobkit.jobs where flow_id = %s group by status",
                       (flow_id,))
    counts = {r["status"]: r["n"] for r in rows}
    assert set(counts) <= set(ENDED), counts
    _nothing_stuck(session, flow_id)
    return counts


def test_a_diamond_runs_each_level_after_the_one_before(session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow("diamond")
    a = graph.add("d.a", {"n": 1})
    b = graph.add("d.b", {"n": 2}, after=[a])
    c = graph.add("d.c", {"n": 3}, after=[a])
    d = graph.add("d.d", {"n": 4}, after=[b, c])
    run = jobkit.flow(session, graph)
    assert _status(session, run.job_ids) == ["pending", "blocked", "blocked", "blocked"]
    assert session.scalar("select blocked_by from jobkit.jobs where id = %s", (run[d],)) == 2
    assert _run_ready(life, "d.b") == []  # blocked: not claimable
    assert _run_ready(life, "d.a") == [run[a]]
    assert _status(session, run.job_ids) == ["completed", "pending", "pending", "blocked"]
    _run_ready(life, "d.b")
    assert _status(session, [run[d]]) == ["blocked"]
    _run_ready(life, "d.c")
    assert _run_ready(life, "d.d") == [run[d]]
    parents = life.parents(run[d])  # in the order the flow listed them
    assert [(p.id, p.status, p.result) for p in parents] == [(run[b], "completed", {"n": 2}),
                                                           (run[c], "completed", {"n": 3})]
    assert _all_ended(session, run.id) == {"completed": 4}


def test_a_chain_of_100_runs_in_order(session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    prev = graph.add("chain", {"i": 0})
    for i in range(1, 100):
        prev = graph.add("chain", {"i": i}, after=[prev])
    run = jobkit.flow(session, graph)
    order = []
    for _ in range(100):
        ran = _run_ready(life, "chain")
        assert len(ran) == 1  # one link at a time
        order += ran
    assert order == run.job_ids
    assert _all_ended(session, run.id) == {"completed": 100}


def test_a_fan_out_of_10000_fans_in_to_one_callback_with_counts(session: Session) -> None:
    life = Lifecycle(session)
    jobs = [NewJob("fan.item", {"i": i}) for i in range(10_000)]
    run = jobkit.gather(session, jobs, NewJob("fan.done", {"report": True}), name="fan")
    callback = run.job_ids[-1]
    failing = set(run.job_ids[:7])
    assert session.scalar("select blocked_by from jobkit.jobs where id = %s", (callback,)) == 10_000
    for _ in range(20):  # in batches, as workers would
        _run_ready(life, "fan.item", fail=failing, limit=500)
    assert _run_ready(life, "fan.done") == [callback]
    got = jobkit.flows.gathered(life.parents(callback))
    assert got.counts == {"succeeded": 9993, "failed": 7}
    assert set(got.failed) == failing
    assert _all_ended(session, run.id) == {"completed": 9994, "failed": 7}


def test_a_gather_stores_a_counter_not_edges(session: Session) -> None:
    """A gather's fan-in is flows.fan_in and the callback's blocked_by (0024), not one edge row per
    job: its parents and children still read as edges, the sweep still settles a parent ended by
    hand, and a job added to the flow later (a replay) is not one of its parents."""
    life = Lifecycle(session)
    run = jobkit.gather(session, [NewJob("g.item", {"i": i}) for i in range(50)], NewJob("g.done", {}))
    items, callback = run.job_ids[:-1], run.job_ids[-1]
    assert session.scalar("select count(*) from jobkit.job_edges where child_id = %s", (callback,)) == 0
    assert session.scalar("select fan_in from jobkit.flows where id = %s", (run.id,)) == callback
    assert session.scalar("select blocked_by from jobkit.jobs where id = %s", (callback,)) == 50
    assert [p.id for p in life.parents(callback)] == items
    assert {p.on_parent_failure for p in life.parents(callback)} == {"run"}
    assert session.all(Statements("jobkit").q["job_children"], {"id": items[3], "limit": 10}) == [
        {"id": callback, "type": "g.done", "status": "blocked", "on_parent_failure": "run"}]
    # a replay joins the flow but not the fan-in
    session.execute("insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, started_at) "
                    "values (%s, 's', 1, 1, 'completed', now())", (items[0],))
    replayed = session.scalar("select jobkit.replay_job(%s, 's')", (items[0],))
    _run_ready(life, "g.item", limit=48)
    session.execute("update jobkit.jobs set status = 'completed', completed_at = now() where id = any(%s) "
                    "and status = 'pending'", (items,))  # ended by hand: nobody told the callback
    assert _run_ready(life, "g.item") == [replayed]
    assert _status(session, [callback]) == ["blocked"]
    session.execute("select jobkit.sweep_stuck()")
    assert _run_ready(life, "g.done") == [callback]
    assert len(life.parents(callback)) == 50
    assert _all_ended(session, run.id) == {"completed": 52}


def test_a_fan_in_in_sql_takes_no_edges(session: Session) -> None:
    run = session.one("select * from jobkit.create_flow(null, '\"x\"', '[{}, {}, {}]', '{}', '{}', "
                      "p_fan_in => true)")
    assert session.all("select status, blocked_by from jobkit.jobs where id = any(%s) order by created_at",
                       (run["job_ids"],)) == [{"status": "pending", "blocked_by": None}] * 2 + [
                           {"status": "blocked", "blocked_by": 2}]
    with pytest.raises(DatabaseError, match="takes no edges"):
        session.execute("select jobkit.create_flow(null, '\"x\"', '[{}, {}]', '{1}', '{2}', p_fan_in => true)")
    alone = session.one("select * from jobkit.create_flow(null, '\"x\"', '[{}]', null, null, p_fan_in => true)")
    assert _status(session, alone["job_ids"]) == ["pending"]  # a gather of nothing: its callback runs


@pytest.mark.parametrize(("policy", "child", "grandchild"), [
    ("fail", "failed", "failed"), ("cancel", "cancelled", "cancelled"), ("run", "completed", "completed")])
def test_a_failing_parent_applies_each_policy(session: Session, policy: str, child: str, grandchild: str) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    parent = graph.add("p.parent", {})
    kid = graph.add("p.child", {}, after=[parent], on_parent_failure=policy)
    graph.add("p.grand", {}, after=[kid])  # its own edge: the default, fail
    run = jobkit.flow(session, graph)
    _run_ready(life, "p.parent", fail={run[parent]})
    _run_ready(life, "p.child")
    _run_ready(life, "p.grand")
    # the grandchild's edge is 'fail': a failed parent fails it, a cancelled one cancels it
    assert _status(session, run.job_ids) == ["failed", child, grandchild]
    _all_ended(session, run.id)


def test_a_cancelled_parent_cancels_fail_children_and_releases_run_children(session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    parent = graph.add("c.parent", {})
    strict = graph.add("c.strict", {}, after=[parent])
    lenient = graph.add("c.lenient", {}, after=[parent], on_parent_failure="run")
    run = jobkit.flow(session, graph)
    assert life.cancel(run[parent])
    assert _status(session, run.job_ids) == ["cancelled", "cancelled", "pending"]
    _run_ready(life, "c.lenient")
    assert _status(session, [run[lenient], run[strict]]) == ["completed", "cancelled"]
    _all_ended(session, run.id)


def test_cancelling_a_flow_midway_cancels_what_has_not_ended(session: Session, db_url: str) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    a = graph.add("m.a", {})
    b = graph.add("m.b", {}, after=[a])
    graph.add("m.c", {}, after=[b])
    graph.add("m.d", {}, after=[a], on_parent_failure="run")
    run = jobkit.flow(session, graph)
    _run_ready(life, "m.a")
    [claimed] = life.claim("m.b", 1, "w", LEASE)  # b is running when the flow is cancelled
    assert session.scalar("select jobkit.cancel_flow(%s)", (run.id,)) == 3
    assert _status(session, run.job_ids) == ["completed", "cancelled", "cancelled", "cancelled"]
    assert session.run(Statements().running_check([(claimed.id, claimed.attempts)])) == {claimed.id: "cancelled"}
    assert life.complete([(claimed.id, claimed.attempts, None)]) == set()  # its late result is refused
    _all_ended(session, run.id)


def test_a_paused_flow_holds_its_ready_jobs_until_resumed(session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    a = graph.add("z.a", {})
    b = graph.add("z.b", {}, after=[a])
    other = graph.add("z.b", {})
    run = jobkit.flow(session, graph)
    [claimed] = life.claim("z.a", 1, "w", LEASE)
    assert session.scalar("select jobkit.pause_flow(%s)", (run.id,)) == 1  # `other` held back
    life.complete([(claimed.id, claimed.attempts, None)])  # a running job finishes
    assert _status(session, [run[b], run[other]]) == ["blocked", "blocked"]
    assert _run_ready(life, "z.b") == []
    session.execute("select jobkit.sweep_stuck()")  # the sweep does not release a paused flow
    assert _status(session, [run[b], run[other]]) == ["blocked", "blocked"]
    assert session.scalar("select jobkit.resume_flow(%s)", (run.id,)) == 2
    assert sorted(_run_ready(life, "z.b")) == sorted([run[b], run[other]])
    _all_ended(session, run.id)


def test_the_sweep_releases_children_a_path_left_blocked(session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow()
    a = graph.add("s.a", {})
    b = graph.add("s.b", {}, after=[a])
    gone = graph.add("s.gone", {})
    c = graph.add("s.c", {}, after=[gone])
    d = graph.add("s.d", {}, after=[(gone, "run")])
    run = jobkit.flow(session, graph)
    # a parent ended by hand (no finishing statement told its children), another deleted
    session.execute("update jobkit.jobs set status = 'completed', completed_at = now() where id = %s", (run[a],))
    assert session.scalar("select jobkit.delete_jobs(%s)", ([run[gone]],)) == 1
    assert _status(session, [run[b], run[c], run[d]]) == ["blocked", "blocked", "blocked"]
    session.execute("select jobkit.sweep_stuck()")
    assert _status(session, [run[b], run[c], run[d]]) == ["pending", "cancelled", "pending"]
    _run_ready(life, "s.b")
    _run_ready(life, "s.d")
    _all_ended(session, run.id)


def test_a_bad_graph_is_refused_whole(session: Session) -> None:
    before = session.scalar("select count(*) from jobkit.jobs")
    with pytest.raises(DatabaseError, match="earlier job"):
        session.execute("select jobkit.create_flow(null, '\"x\"', '[{}, {}]', '{2}', '{1}')")
    with pytest.raises(DatabaseError, match="twice"):
        session.execute("select jobkit.create_flow(null, '\"x\"', '[{}, {}]', '{1,1}', '{2,2}')")
    with pytest.raises(DatabaseError, match="policy"):
        session.execute("select jobkit.create_flow(null, '\"x\"', '[{}, {}]', '{1}', '{2}', '{later}')")
    graph = jobkit.Flow()
    first = graph.add("x", {})
    with pytest.raises(jobkit.JobkitError, match="on_parent_failure"):
        graph.add("y", {}, after=[(first, "later")])
    with pytest.raises(jobkit.JobkitError, match="not a job added to this flow"):
        jobkit.Flow().add("y", {}, after=[first])
    assert session.scalar("select count(*) from jobkit.jobs") == before
    assert session.scalar("select count(*) from jobkit.flows") == 0


def test_a_handler_reads_its_parents_and_a_callback_its_gather(db_url: str, session: Session) -> None:
    jobs = Registry()
    seen: dict[str, Any] = {}

    @jobs.handler("h.item")
    async def item(payload: Any, ctx: Any) -> Any:
        if payload["i"] == 2:
            raise jobkit.Permanent("no")
        return payload["i"] * 10

    @jobs.handler("h.report")
    async def report(payload: Any, ctx: Any) -> Any:
        parents = await ctx.parents()
        seen["results"] = sorted(p.result for p in parents if p.status == "completed")
        seen["counts"] = (await ctx.gathered()).counts
        return seen["counts"]

    run = jobkit.gather(db_url, [NewJob("h.item", {"i": i}) for i in range(4)], NewJob("h.report", {}))

    async def main() -> None:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            drainer = Drainer(jobs, backend, concurrency=2)
            await drainer.drain("h.item", budget=timedelta(seconds=20))
            await drainer.drain("h.report", budget=timedelta(seconds=20))
        finally:
            await backend.close()

    asyncio.run(main())
    assert seen == {"results": [0, 10, 30], "counts": {"succeeded": 3, "failed": 1}}
    assert _all_ended(session, run.id) == {"completed": 4, "failed": 1}


def test_replay_from_a_step_copies_the_steps_before_it(session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("r.job", {"x": 1}))
    session.execute(
        "insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, result, started_at) values "
        "(%(id)s, 'a', 1, 1, 'completed', '1', now() - interval '3 s'),"
        "(%(id)s, 'b', 1, 1, 'completed', '2', now() - interval '2 s'),"
        "(%(id)s, 'c', 1, 1, 'completed', '3', now() - interval '1 s')", {"id": job_id})
    new = session.scalar("select jobkit.replay_job(%s, 'b')", (job_id,))
    assert new != job_id
    assert session.all("select name, result from jobkit.job_steps where job_id = %s order by name", (new,)) == [
        {"name": "a", "result": 1}]
    assert session.one("select type, payload, status from jobkit.jobs where id = %s", (new,)) == {
        "type": "r.job", "payload": {"x": 1}, "status": "pending"}
    with pytest.raises(DatabaseError, match="no step named"):
        session.execute("select jobkit.replay_job(%s, 'nope')", (job_id,))


def _cli(db_url: str, *args: str) -> Any:
    from click.testing import CliRunner
    from jobkit.cli import cli

    return CliRunner().invoke(cli, [*args, "--db-url", db_url])


def test_the_cli_shows_a_flow_and_acts_on_it_audited(db_url: str, session: Session) -> None:
    life = Lifecycle(session)
    graph = jobkit.Flow("order")
    charge = graph.add("o.charge", {})
    graph.add("o.email", {}, after=[charge])
    run = jobkit.flow(session, graph)
    [claimed] = life.claim("o.charge", 1, "w", LEASE)
    session.execute("insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, started_at) "
                    "values (%s, 'stripe', 1, 1, 'completed', now() - interval '2 s')", (claimed.id,))
    life.complete([(claimed.id, claimed.attempts, None)])
    shown = _cli(db_url, "flows", "show", str(run.job_ids[1]))  # a job's id finds its flow
    assert shown.exit_code == 0, shown.output
    assert "2 jobs: 1 completed, 1 pending" in shown.output and "after #1" in shown.output
    assert "step stripe#1 completed" in shown.output
    assert _cli(db_url, "flows", "pause", str(run.id), "--as", "ann").output.startswith("held back 1 job(s)")
    assert _cli(db_url, "flows", "resume", str(run.id)).output.startswith("released 1 job(s)")
    assert _cli(db_url, "flows", "cancel", str(run.id)).output.startswith("cancelled 1 job(s)")
    replayed = _cli(db_url, "jobs", "replay", str(claimed.id), "--from-step", "stripe")
    assert replayed.exit_code == 0 and "as job" in replayed.output
    assert [r["action"] for r in session.all("select action from jobkit.audit_log order by id")] == [
        "pause_flow", "resume_flow", "cancel_flow", "replay"]
    missing = _cli(db_url, "flows", "show", "8d1f7c9e-0000-4000-8000-000000000000")
    assert missing.exit_code != 0 and "no flow" in missing.output
    bad = _cli(db_url, "flows", "cancel", "not-a-uuid")
    assert bad.exit_code != 0 and "not a flow id" in bad.output
    nostep = _cli(db_url, "jobs", "replay", str(claimed.id), "--from-step", "nope")
    assert nostep.exit_code != 0 and "no step named" in nostep.output
    new_id = UUID(replayed.output.split()[-1])  # the replay joins the flow, pending, with the step copied
    assert session.scalar("select status from jobkit.jobs where id = %s and flow_id = %s",
                          (new_id, run.id)) == "pending"
    _nothing_stuck(session, run.id)


def test_the_dashboard_job_page_shows_steps_and_graph_and_replays(db_url: str, session: Session) -> None:
    import re

    from jobkit.config import Settings
    from jobkit.dashboard.app import Dashboard
    from starlette.testclient import TestClient

    life = Lifecycle(session)
    graph = jobkit.Flow("page")
    charge = graph.add("g.charge", {})
    graph.add("g.email", {}, after=[(charge, "run")])
    run = jobkit.flow(session, graph)
    [claimed] = life.claim("g.charge", 1, "w", LEASE)
    session.execute("insert into jobkit.job_steps (job_id, name, occurrence, attempt, status, started_at) "
                    "values (%s, 'stripe<x>', 1, 1, 'completed', now() - interval '2 s')", (claimed.id,))
    life.complete([(claimed.id, claimed.attempts, None)])
    dashboard = Dashboard(db_url, Settings(db_url=db_url))
    html = {"accept": "text/html"}
    with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False) as client:
        page = client.get(f"/jobs/{run[charge]}", headers=html).text
        assert 'id="job-steps"' in page and "stripe&lt;x&gt;" in page  # escaped
        assert f'href="/jobs/{run.job_ids[1]}"' in page and ">child<" in page
        child = client.get(f"/jobs/{run.job_ids[1]}", headers=html).text
        assert f'href="/jobs/{run[charge]}"' in child and ">parent<" in child and ">run<" in child
        token = re.search(r'name="csrf-token" content="([^"]+)"', page)
        assert token is not None
        refused = client.post(f"/jobs/{run[charge]}/replay", data={"step": "stripe<x>"})
        assert refused.status_code == 403 and session.scalar("select count(*) from jobkit.audit_log") == 0
        done = client.post(f"/jobs/{run[charge]}/replay", data={"csrf": token.group(1), "step": "stripe<x>"})
        assert done.status_code == 303
        new_id = done.headers["location"].rsplit("/", 1)[1]
        assert session.scalar("select action from jobkit.audit_log") == "replay"
        assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s", (new_id,)) == 0
        unknown = client.post(f"/jobs/{run[charge]}/replay", data={"csrf": token.group(1), "step": "nope"})
        assert unknown.status_code == 400
    dashboard.close()
