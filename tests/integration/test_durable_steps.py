"""Durable steps on PostgreSQL through the real Drainer (issue 25, item 1): a retry returns the
stored results without running completed steps again (async and sync handlers); a transactional
step's work commits with its record, exactly once, and is rolled back when its attempt lost the job
or when it raises; a job's steps go with it when it is deleted or pruned."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import jobkit
import pytest
from jobkit.connector import Database, Session
from jobkit.exceptions import DatabaseError
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary


def _registry(db_url: str, runs: Counter[str]) -> Registry:
    jobs = Registry()

    @jobs.handler("order.async", max_attempts=3)
    async def order_async(payload: Any, ctx: Any) -> Any:
        async def record(conn: Any, amount: int) -> int:
            runs["record"] += 1
            await conn.execute("insert into ledger (job_id, amount) values (%s, %s)", (ctx.id, amount))
            return amount

        charged = await ctx.step("charge", lambda: runs.update(["charge"]) or {"key": ctx.step_key("charge")})
        booked = await ctx.transaction_step("book", record, payload["amount"])
        if ctx.attempt == 1:
            raise ConnectionError("down after two steps")
        return {"charged": charged, "booked": booked}

    @jobs.handler("order.sync", max_attempts=3)
    def order_sync(payload: Any, ctx: Any) -> Any:
        got = [ctx.step("part", lambda i=i: runs.update([f"part{i}"]) or i) for i in range(3)]
        if ctx.attempt == 1:
            raise ConnectionError("down after three steps")
        return got

    @jobs.handler("order.fenced", max_attempts=3)
    async def order_fenced(payload: Any, ctx: Any) -> Any:
        async def book(conn: Any) -> None:
            await conn.execute("insert into ledger (job_id, amount) values (%s, 1)", (ctx.id,))
            await asyncio.to_thread(_cancel, db_url, ctx.id)  # the attempt loses the job meanwhile
        return await ctx.transaction_step("book", book)

    @jobs.handler("order.broken", max_attempts=1)
    async def order_broken(payload: Any, ctx: Any) -> Any:
        async def book(conn: Any) -> None:
            await conn.execute("insert into ledger (job_id, amount) values (%s, 2)", (ctx.id,))
            raise ValueError("ledger closed")
        return await ctx.transaction_step("book", book)

    return jobs


def _cancel(db_url: str, job_id: UUID) -> None:
    with Database(db_url).session() as s:
        assert Lifecycle(s).cancel(job_id)


def _drain(db_url: str, runs: Counter[str], job_type: str) -> DrainSummary:
    async def main() -> DrainSummary:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(_registry(db_url, runs), backend, concurrency=2).drain(
                job_type, budget=timedelta(seconds=30))
        finally:
            await backend.close()
    return asyncio.run(main())


def _setup(session: Session, job_type: str, payload: Any) -> UUID:
    session.execute("create table if not exists ledger (job_id uuid not null, amount int not null)")
    return Lifecycle(session).enqueue(NewJob(job_type, payload))


def _due_now(session: Session, job_id: UUID) -> None:
    session.execute("update jobkit.jobs set scheduled_for = now() where id = %s", (job_id,))


def test_a_retry_replays_completed_steps_and_the_transactional_step_runs_once(
    db_url: str, session: Session
) -> None:
    runs: Counter[str] = Counter()
    job_id = _setup(session, "order.async", {"amount": 7})
    assert _drain(db_url, runs, "order.async").failed == 1
    _due_now(session, job_id)
    assert _drain(db_url, runs, "order.async").completed == 1
    job = session.one("select status, attempts, result from jobkit.jobs where id = %s", (job_id,))
    assert job == {"status": "completed", "attempts": 2,
                   "result": {"charged": {"key": f"jobkit:{job_id}:charge:1"}, "booked": 7}}
    assert runs == Counter({"charge": 1, "record": 1})
    assert session.all("select amount from ledger where job_id = %s", (job_id,)) == [{"amount": 7}]
    steps = session.all("select name, occurrence, attempt, status, result from jobkit.job_steps "
                        "where job_id = %s order by name", (job_id,))
    assert steps == [{"name": "book", "occurrence": 1, "attempt": 1, "status": "completed", "result": 7},
                     {"name": "charge", "occurrence": 1, "attempt": 1, "status": "completed",
                      "result": {"key": f"jobkit:{job_id}:charge:1"}}]


def test_a_sync_handlers_steps_are_replayed_too(db_url: str, session: Session) -> None:
    runs: Counter[str] = Counter()
    job_id = _setup(session, "order.sync", {})
    _drain(db_url, runs, "order.sync")
    _due_now(session, job_id)
    _drain(db_url, runs, "order.sync")
    assert session.scalar("select result from jobkit.jobs where id = %s", (job_id,)) == [0, 1, 2]
    assert runs == Counter({"part0": 1, "part1": 1, "part2": 1})
    assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s and name = 'part'",
                          (job_id,)) == 3


def test_a_transactional_step_is_rolled_back_when_its_attempt_lost_the_job(
    db_url: str, session: Session
) -> None:
    job_id = _setup(session, "order.fenced", {})
    summary = _drain(db_url, Counter(), "order.fenced")
    assert summary.completed == 0 and summary.lost + summary.cancelled == 1
    assert session.scalar("select status from jobkit.jobs where id = %s", (job_id,)) == "cancelled"
    assert session.scalar("select count(*) from ledger where job_id = %s", (job_id,)) == 0
    assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s", (job_id,)) == 0


def test_a_transactional_step_that_raises_is_rolled_back_and_its_error_kept(
    db_url: str, session: Session
) -> None:
    job_id = _setup(session, "order.broken", {})
    assert _drain(db_url, Counter(), "order.broken").failed == 1
    assert session.scalar("select count(*) from ledger where job_id = %s", (job_id,)) == 0
    row = session.one("select status, result, error from jobkit.job_steps where job_id = %s", (job_id,))
    assert row is not None and row["status"] == "failed" and row["result"] is None
    assert "ValueError: ledger closed" in row["error"]


def test_a_jobs_steps_go_with_it(db_url: str, session: Session) -> None:
    runs: Counter[str] = Counter()
    deleted = _setup(session, "order.sync", {})
    pruned = Lifecycle(session).enqueue(NewJob("order.sync", {}))
    _drain(db_url, runs, "order.sync")  # both fail once, their steps stored
    assert session.scalar("select count(distinct job_id) from jobkit.job_steps") == 2
    session.execute("update jobkit.jobs set status = 'dead', completed_at = now() - interval '1 day'")
    assert session.scalar("select jobkit.delete_jobs(array[%s]::uuid[])", (deleted,)) == 1
    assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s", (deleted,)) == 0
    assert session.scalar("select jobkit.prune(interval '1 hour')") == 1
    assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s", (pruned,)) == 0
    assert jobkit.StepLost.default_hint


def test_the_readme_example_runs(db_url: str, session: Session) -> None:
    """The workflows guide's "Durable steps" example, as written, on the worker over PostgreSQL: its three
    steps stored, the charge made with the step's idempotency key, the order row committed."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "workflows.md").read_text()
    section = readme[readme.index("## Durable steps"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    charged: list[str] = []

    class Payments:
        @staticmethod
        async def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
            charged.append(idempotency_key)
            return {"id": f"ch_{amount}"}

    sent: list[str] = []
    namespace: dict[str, Any] = {"payments": Payments, "send_receipt": sent.append}
    exec(compile(code.group(1), "workflows.md", "exec"), namespace)  # noqa: S102 - the guide's own code
    session.execute("create table orders (id int primary key, charge_id text not null)")
    job_id = Lifecycle(session).enqueue(NewJob("checkout", {"id": 1, "amount": 5, "email": "a@example.com"}))

    async def main() -> DrainSummary:
        backend = PostgresBackend(db_url)
        await backend.open()
        try:
            return await Drainer(namespace["jobs"], backend).drain("checkout", budget=timedelta(seconds=30))
        finally:
            await backend.close()

    assert asyncio.run(main()).completed == 1
    assert session.scalar("select result from jobkit.jobs where id = %s", (job_id,)) == "ch_5"
    assert charged == [f"jobkit:{job_id}:charge:1"] and sent == ["a@example.com"]
    assert session.all("select id, charge_id from orders") == [{"id": 1, "charge_id": "ch_5"}]
    assert session.scalar("select count(*) from jobkit.job_steps where job_id = %s", (job_id,)) == 3


def test_save_steps_without_checks_refuses_what_they_refused_and_replaces_only_failed_rows(
        session: Session) -> None:
    """job_steps has no CHECK since 0024: save_steps refuses a bad name or occurrence itself (the
    whole batch), and a record that meets a stored one (the primary key's fallback) replaces a
    failed row, never a completed one; a key twice in one batch keeps the last record."""
    life = Lifecycle(session)
    life.enqueue(NewJob("steps.sql", {}))
    job = life.claim("steps.sql", 1, "w", timedelta(minutes=5))[0]
    call = ("select count(*) from jobkit.save_steps(%s::uuid[], %s::int[], %s::text[], %s::int[], "
            "%s::jsonb, %s::text[], null, null)")

    def save(names: list[str], occurrences: list[int], results: str, errors: list[str | None] | None = None) -> int:
        n = len(names)
        return int(session.scalar(call, ([job.id] * n, [job.attempts] * n, names, occurrences, results, errors)))

    for names, occurrences in ((["ok", "x" * 201], [1, 1]), (["ok", ""], [1, 1]), (["ok", "a"], [1, 0])):
        with pytest.raises(DatabaseError, match="a name of 1 to 200 characters"):
            save(names, occurrences, "[1, 2]")
    assert save(["y" * 200, "ok"], [1, 1], "[1, 2]") == 1  # 200 is allowed; the pair held
    assert save(["a", "b"], [1, 1], "[null, null]", ["boom", "boom"]) == 1
    assert save(["a", "b", "b"], [1, 1, 1], '["a", "b1", "b2"]') == 1  # failed rows replaced
    assert save(["a"], [1], '["again"]') == 1  # a completed row is kept
    rows = session.all("select name, status, result from jobkit.job_steps where job_id = %s order by name",
                       (job.id,))
    assert [(r["name"][:2], r["status"], r["result"]) for r in rows] == [
        ("a", "completed", "a"), ("b", "completed", "b2"), ("ok", "completed", 2), ("yy", "completed", 1)]
    # load_steps (a lateral probe per job since h25) reads each job's completed steps once, even
    # when the job is asked for twice, and nothing for a job without steps
    loaded = session.all("select name, result from jobkit.load_steps(%s::uuid[]) order by name",
                         ([job.id, job.id, uuid4()],))
    assert [(r["name"][:2], r["result"]) for r in loaded] == [("a", "a"), ("b", "b2"), ("ok", 2), ("yy", 1)]
