"""Sleeps, waits and events on PostgreSQL through the real Drainer (issue 25, items 2 and 3): a wait
ends the attempt without consuming it and the job waits holding no worker; the claim of its type
resolves a sleep whose time has come; an emit resumes the waits registered before it in its own
transaction, and a wait registered after it still sees it (latch); timeouts return None; jobs
waits resume when the jobs finish; subscriptions make one job per (event, subscriber); the sweep
catches what nothing resolved."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any
from uuid import UUID

import jobkit
import pytest
from jobkit.connector import Session
from jobkit.exceptions import ConfigError
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary


def _registry(runs: Counter[str]) -> Registry:
    jobs = Registry()

    @jobs.handler("w.sleep")
    async def sleeper(payload: Any, ctx: Any) -> Any:
        first = await ctx.step("first", lambda: runs.update(["first"]) or 1)
        await ctx.sleep(payload.get("for", "1h"))
        return first + await ctx.step("second", lambda: runs.update(["second"]) or 1)

    @jobs.handler("w.event")
    async def waiter(payload: Any, ctx: Any) -> Any:
        runs["started"] += 1
        got = await ctx.wait_for_event("order.shipped", key=payload["order"], timeout=payload.get("timeout"))
        return None if got is None else {"data": got.data, "generation": got.generation}

    @jobs.handler("w.any")
    def any_of(payload: Any, ctx: Any) -> Any:  # a sync handler
        got = ctx.wait_any(ctx.event("a", key=1), ctx.event("b", key=1), timeout="1h")
        return got.name

    @jobs.handler("w.parent")
    async def parent(payload: Any, ctx: Any) -> Any:
        children = await ctx.step("spawn", lambda: [str(jobkit.enqueue(payload["url"], "w.child", {}))
                                                      for _ in range(2)])
        states = await ctx.wait_for_jobs(children)
        return sorted(states.values())

    @jobs.handler("w.child")
    async def child(payload: Any, ctx: Any) -> Any:
        return "done"

    @jobs.handler("w.twice")
    async def twice(payload: Any, ctx: Any) -> Any:
        one = await ctx.wait_for_event("tick", key="k")
        two = await ctx.wait_for_event("tick", key="k")
        return [one.data, two.data]

    @jobs.handler("w.subscriber")
    async def subscriber(payload: Any, ctx: Any) -> Any:
        return payload["data"]

    return jobs


def _drain(db_url: str, job_type: str, runs: Counter[str] | None = None) -> DrainSummary:
    async def main() -> DrainSummary:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(_registry(runs if runs is not None else Counter()), backend).drain(
                job_type, budget=timedelta(seconds=30))
        finally:
            await backend.close()
    return asyncio.run(main())


def _job(session: Session, job_id: UUID) -> dict[str, Any]:
    row = session.one("select status, attempts, result from jobkit.jobs where id = %s", (job_id,))
    assert row is not None
    return dict(row)


def _past(session: Session, job_id: UUID) -> None:
    """Its wait's due time has passed (as if the time had come)."""
    session.execute("update jobkit.job_waits set due = now() - interval '1 second' where job_id = %s", (job_id,))


def test_a_sleep_frees_the_worker_and_the_claim_resumes_it_when_its_time_comes(
    db_url: str, session: Session
) -> None:
    runs: Counter[str] = Counter()
    job_id = Lifecycle(session).enqueue(NewJob("w.sleep", {"for": "3d"}))
    summary = _drain(db_url, "w.sleep", runs)
    assert summary.waited == 1 and summary.completed == 0
    assert _job(session, job_id) == {"status": "waiting", "attempts": 0, "result": None}
    wait = session.one("select kind, step, occurrence, due > now() + interval '71 hours' as later "
                       "from jobkit.job_waits where job_id = %s", (job_id,))
    assert wait == {"kind": "sleep", "step": "sleep", "occurrence": 1, "later": True}
    assert _drain(db_url, "w.sleep", runs).claimed == 0  # not due: nothing to claim
    _past(session, job_id)
    assert _drain(db_url, "w.sleep", runs).completed == 1
    assert _job(session, job_id) == {"status": "completed", "attempts": 1, "result": 2}
    assert runs == Counter({"first": 1, "second": 1})
    assert session.scalar("select count(*) from jobkit.job_waits") == 0
    outcomes = [r["outcome"] for r in session.all(
        "select outcome from jobkit.job_attempts where job_id = %s order by id", (job_id,))]
    assert outcomes == ["waited"]
    kinds = session.all("select name, kind from jobkit.job_steps where job_id = %s order by started_at, name",
                        (job_id,))
    assert {r["name"]: r["kind"] for r in kinds} == {"first": "step", "sleep": "wait", "second": "step"}


def test_an_emit_resumes_a_waiting_job_in_its_transaction(db_url: str, session: Session) -> None:
    runs: Counter[str] = Counter()
    job_id = Lifecycle(session).enqueue(NewJob("w.event", {"order": "42"}))
    _drain(db_url, "w.event", runs)
    assert _job(session, job_id)["status"] == "waiting"
    other = session.scalar("select jobkit.emit('order.shipped', '43', '{}')")  # another key: no effect
    assert other is not None and _job(session, job_id)["status"] == "waiting"
    with session.transaction():
        event_id = jobkit.emit(session, "order.shipped", key=42, data={"carrier": "ups"})
        assert _job(session, job_id)["status"] == "pending"  # in the emit's own transaction
    assert _drain(db_url, "w.event", runs).completed == 1
    assert _job(session, job_id)["result"] == {"data": {"carrier": "ups"}, "generation": 1}
    assert runs["started"] == 2
    step = session.one("select result from jobkit.job_steps where job_id = %s", (job_id,))
    assert step is not None and step["result"]["id"] == event_id


def test_a_wait_registered_after_the_emit_sees_it(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.event", {"order": "7"}))
    jobkit.emit(db_url, "order.shipped", key="7", data=1)
    jobkit.emit(db_url, "order.shipped", key="7", data=2)  # a later generation
    assert _drain(db_url, "w.event").waited == 1
    assert _job(session, job_id)["status"] == "pending"  # latched: pending at once, and it replays
    assert _drain(db_url, "w.event").completed == 1
    assert _job(session, job_id)["result"] == {"data": 1, "generation": 1}  # the earliest


def test_an_event_before_the_job_does_not_count(db_url: str, session: Session) -> None:
    jobkit.emit(db_url, "order.shipped", key="8")
    job_id = Lifecycle(session).enqueue(NewJob("w.event", {"order": "8", "timeout": "1h"}))
    _drain(db_url, "w.event")
    assert _job(session, job_id)["status"] == "waiting"


def test_a_timeout_returns_none(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.event", {"order": "9", "timeout": "2h"}))
    _drain(db_url, "w.event")
    assert session.scalar("select due between now() + interval '119 minutes' and now() + interval '2 hours' "
                          "from jobkit.job_waits where job_id = %s", (job_id,))
    _past(session, job_id)
    assert _drain(db_url, "w.event").completed == 1
    assert _job(session, job_id)["result"] is None
    jobkit.emit(db_url, "order.shipped", key="9")  # too late: nothing happens
    assert _job(session, job_id)["status"] == "completed"


def test_wait_any_in_a_sync_handler(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.any", {}))
    _drain(db_url, "w.any")
    jobkit.emit(db_url, "b", key=1)
    jobkit.emit(db_url, "a", key=1)
    assert _drain(db_url, "w.any").completed == 1
    assert _job(session, job_id)["result"] == "b"


def test_each_wait_of_a_job_consumes_one_event(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.twice", {}))
    jobkit.emit(db_url, "tick", key="k", data="one")
    _drain(db_url, "w.twice")
    _drain(db_url, "w.twice")
    assert _job(session, job_id)["status"] == "waiting"
    jobkit.emit(db_url, "tick", key="k", data="two")
    _drain(db_url, "w.twice")
    assert _job(session, job_id)["result"] == ["one", "two"]


def test_wait_for_jobs_resumes_when_they_all_finish(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.parent", {"url": db_url}))
    _drain(db_url, "w.parent")
    assert _job(session, job_id)["status"] == "waiting"
    assert _drain(db_url, "w.child").completed == 2
    assert _job(session, job_id)["status"] == "pending"
    assert _drain(db_url, "w.parent").completed == 1
    assert _job(session, job_id)["result"] == ["completed", "completed"]
    assert session.scalar("select count(*) from jobkit.jobs where type = 'w.child'") == 2  # spawned once


def test_subscriptions_make_one_job_per_event_and_subscriber(db_url: str, session: Session) -> None:
    session.execute("insert into jobkit.event_config (name, types) values ('order.paid', '{w.subscriber,w.child}')")
    first = jobkit.emit(db_url, "order.paid", key="1", data={"total": 5}, id="evt_1")
    again = jobkit.emit(db_url, "order.paid", key="1", data={"total": 5}, id="evt_1")  # a retried emit
    assert first == again
    assert session.scalar("select count(*) from jobkit.events") == 1
    jobs = session.all("select type, payload from jobkit.jobs order by type")
    assert [j["type"] for j in jobs] == ["w.child", "w.subscriber"]
    assert jobs[1]["payload"]["data"] == {"total": 5} and jobs[1]["payload"]["id"] == first
    assert _drain(db_url, "w.subscriber").completed == 1
    second = jobkit.emit(db_url, "order.paid", key="1", data={"total": 6})  # a new generation
    assert second != first and session.scalar("select count(*) from jobkit.jobs") == 4
    assert session.scalar("select generation from jobkit.events where id = %s", (second,)) == 2


def test_the_sweep_catches_a_lost_wake_up(db_url: str, session: Session) -> None:
    slept = Lifecycle(session).enqueue(NewJob("w.sleep", {"for": "1h"}))
    stranded = Lifecycle(session).enqueue(NewJob("w.event", {"order": "s"}))
    _drain(db_url, "w.sleep")
    _drain(db_url, "w.event")
    _past(session, slept)  # its time came, and no worker was told
    # an event whose resolution was lost (as an emit from a REPEATABLE READ snapshot can miss a wait)
    session.execute("insert into jobkit.events (name, key, generation, expires_at) "
                    "values ('order.shipped', 's', 1, now() + interval '1 day')")
    assert {_job(session, slept)["status"], _job(session, stranded)["status"]} == {"waiting"}
    assert Lifecycle(session).sweep_stuck() == {}
    assert _job(session, slept)["status"] == "pending" and _job(session, stranded)["status"] == "pending"
    assert _drain(db_url, "w.event").completed == 1
    # a waiting job that lost its wait altogether is made pending (it replays and waits again)
    lost = Lifecycle(session).enqueue(NewJob("w.event", {"order": "t"}))
    _drain(db_url, "w.event")
    session.execute("delete from jobkit.job_waits where job_id = %s", (lost,))
    session.execute("update jobkit.jobs set scheduled_for = now() - interval '2 minutes' where id = %s", (lost,))
    assert Lifecycle(session).sweep_waits() == 1
    assert _job(session, lost)["status"] == "pending"


def test_a_waiting_job_can_be_cancelled(db_url: str, session: Session) -> None:
    job_id = Lifecycle(session).enqueue(NewJob("w.event", {"order": "c"}))
    _drain(db_url, "w.event")
    assert Lifecycle(session).cancel(job_id)
    assert _job(session, job_id)["status"] == "cancelled"
    assert session.scalar("select count(*) from jobkit.job_waits") == 0


def test_a_stale_attempt_cannot_suspend(db_url: str, session: Session) -> None:
    from jobkit.jobs import WaitSpec

    job_id = Lifecycle(session).enqueue(NewJob("w.sleep", {}))
    [claimed] = Lifecycle(session).claim("w.sleep", 1, "w1", timedelta(seconds=30))
    spec = WaitSpec("sleep", 1, "sleep", delay=timedelta(hours=1))
    assert Lifecycle(session).suspend(job_id, claimed.attempts + 1, spec) is None
    assert Lifecycle(session).suspend(job_id, claimed.attempts, spec) == "waiting"
    assert Lifecycle(session).suspend(job_id, claimed.attempts, spec) is None  # once


def test_bad_waits_and_emits_are_refused_with_a_hint(db_url: str, session: Session) -> None:
    for bad in ({"name": ""}, {"name": "x" * 201}, {"name": "a", "key": "k" * 1001}, {"name": "a", "data": {1j}}):
        with pytest.raises(ConfigError) as caught:
            jobkit.emit(db_url, **bad)  # type: ignore[arg-type]
        assert caught.value.hint
    assert session.scalar("select count(*) from jobkit.events") == 0
    with pytest.raises(Exception, match="name of 1 to 200"):
        session.execute("select jobkit.emit('')")


def test_deploy_writes_the_events_subscriptions(db_url: str, session: Session) -> None:
    from jobkit.config import EventConfig, Settings
    from jobkit.connector import Database
    from jobkit.schema.deploy import DeployOptions, deploy

    events = {"order.paid": EventConfig(types=("w.subscriber",), retention=timedelta(days=30))}
    deploy(Database(db_url), Settings(db_url=db_url, events=events), DeployOptions(schedules=False),
           echo=lambda _m: None)
    row = session.one("select name, types, retention from jobkit.event_config")
    assert row == {"name": "order.paid", "types": ["w.subscriber"], "retention": timedelta(days=30)}
    jobkit.emit(db_url, "order.paid", key="1")
    assert session.scalar("select count(*) from jobkit.jobs where type = 'w.subscriber'") == 1
    deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(schedules=False), echo=lambda _m: None)
    assert session.scalar("select count(*) from jobkit.event_config") == 0
