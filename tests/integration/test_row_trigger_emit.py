"""Row triggers that emit an event instead of enqueuing a job type (issue 25, item 3, last point):
``[triggers.<name>] emit = "order.paid"``. Real PostgreSQL; every assertion is on what the database
did: the events stored, the waits resolved in the row change's transaction, the subscribers' jobs,
the number of set-based emits per statement (pg_stat_xact_user_functions), and the catalog."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobkit.cli import cli
from jobkit.config import Settings, parse_settings
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, DeployError
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops import doctor
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer, DrainSummary

TABLES = ("create table public.orders (id bigint primary key, status text not null default 'new', email text, "
          "customer int);"
          "create table public.lines (\"order\" bigint, no int, sku text, primary key (\"order\", no))")
PAID = {"table": "public.orders", "on": ["update"], "emit": "order.paid", "payload": "row",
        "when": "new.status = 'paid' and old.status is distinct from 'paid'"}
PLACED = {"table": "orders", "on": ["insert"], "emit": "order.placed", "payload": ["id", "email"]}
EVENTS = {"order.paid": {"types": ["sub_a", "sub_b"]}}


def _settings(url: str, events: dict[str, Any] | None = None, **triggers: dict[str, Any]) -> Settings:
    return parse_settings({"db_url": url, "triggers": triggers, "events": events or {}})


def _deploy(url: str, events: dict[str, Any] | None = None, check: bool = False,
            **triggers: dict[str, Any]) -> list[str]:
    report = deploy(Database(url), _settings(url, events, **triggers),
                    DeployOptions(schedules=False, check=check), echo=lambda _m: None)
    return report.triggers_changed


def _scalar(url: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def _registry() -> Registry:
    jobs = Registry()

    @jobs.handler("on.paid")
    async def on_paid(payload: Any, ctx: Any) -> Any:
        got = await ctx.wait_for_event("order.paid", key=payload["order"], timeout="1h")
        return None if got is None else {"key": got.key, "status": got.data["status"]}

    return jobs


def _drain(url: str, job_type: str) -> DrainSummary:
    async def main() -> DrainSummary:
        backend = PostgresBackend(url)
        await backend.open()
        try:
            return await Drainer(_registry(), backend).drain(job_type, budget=timedelta(seconds=30))
        finally:
            await backend.close()
    return asyncio.run(main())


@pytest.fixture
def shop(db_url: str) -> str:
    """jobkit deployed with an update trigger emitting order.paid (two subscribers) and an insert
    trigger emitting order.placed (none)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(TABLES)
    _deploy(db_url, EVENTS, paid=PAID, placed=PLACED)
    return db_url


def test_an_update_wakes_the_job_waiting_on_its_row_and_makes_a_job_per_subscriber(
    shop: str, session: Session
) -> None:
    waiter = Lifecycle(session).enqueue(NewJob("on.paid", {"order": "7"}))
    assert _drain(shop, "on.paid").waited == 1
    session.execute("insert into orders (id, email, customer) select g, g || '@x', g % 3 "
                    "from generate_series(1, 10) g")
    assert session.scalar("select status from jobkit.jobs where id = %s", (waiter,)) == "waiting"
    with session.transaction():
        session.execute("update orders set status = 'paid' where id in (7, 8)")
        # resolved in the row change's own transaction, as emit does
        assert session.scalar("select status from jobkit.jobs where id = %s", (waiter,)) == "pending"
        assert session.scalar("select count(*) from jobkit.job_waits") == 0
    events = session.all("select key, generation, data->>'status' as status from jobkit.events "
                         "where name = 'order.paid' order by key")
    assert [dict(e) for e in events] == [{"key": "7", "generation": 1, "status": "paid"},
                                         {"key": "8", "generation": 1, "status": "paid"}]
    subs = session.all("select type, payload->>'key' as key, payload->'data'->>'email' as email "
                       "from jobkit.jobs where type like 'sub_%%' order by type, key")
    assert [tuple(r.values()) for r in subs] == [("sub_a", "7", "7@x"), ("sub_a", "8", "8@x"),
                                                 ("sub_b", "7", "7@x"), ("sub_b", "8", "8@x")]
    assert _drain(shop, "on.paid").completed == 1
    assert session.scalar("select result from jobkit.jobs where id = %s", (waiter,)) == {"key": "7", "status": "paid"}
    session.execute("update orders set status = 'paid' where id <= 8")  # `when`: only 1-6 become paid now
    assert session.scalar("select count(*) from jobkit.events where name = 'order.paid'") == 8
    assert session.scalar("select count(*) from jobkit.jobs where type like 'sub_%%'") == 16


def test_a_thousand_row_insert_is_a_thousand_events_from_one_set_based_emit(shop: str) -> None:
    with psycopg.connect(shop) as conn:  # one transaction: its function-call counters
        conn.execute("set local track_functions = 'all'")
        conn.execute("insert into orders (id, email) select g, 'u' || g || '@x' from generate_series(1, 1000) g")
        calls: dict[str, int] = dict(conn.execute("select funcname::text, calls from pg_stat_xact_user_functions "
                                  "where schemaname = 'jobkit'").fetchall())
    assert calls.get("rowtrigger_placed_ins") == 1
    assert calls.get("_emit_many") == 1 and "emit" not in calls and "enqueue" not in calls
    row = _scalar(shop, "select jsonb_build_array(count(*), count(distinct key), max(generation), "
                        "min(key::int), max(key::int)) from jobkit.events where name = 'order.placed'")
    assert row == [1000, 1000, 1, 1, 1000]
    assert _scalar(shop, "select data from jobkit.events where name = 'order.placed' and key = '42'") == {
        "id": 42, "email": "u42@x"}
    assert _scalar(shop, "select count(*) from jobkit.jobs") == 0  # order.placed has no subscribers


def test_a_rolled_back_change_emits_nothing(shop: str, session: Session) -> None:
    waiter = Lifecycle(session).enqueue(NewJob("on.paid", {"order": "1"}))
    _drain(shop, "on.paid")
    session.execute("insert into orders (id) values (1)")
    with pytest.raises(RuntimeError), session.transaction():
        session.execute("update orders set status = 'paid' where id = 1")
        assert session.scalar("select count(*) from jobkit.events where name = 'order.paid'") == 1
        raise RuntimeError("roll back")
    assert session.scalar("select count(*) from jobkit.events where name = 'order.paid'") == 0
    assert session.scalar("select count(*) from jobkit.jobs where type like 'sub_%%'") == 0
    assert session.scalar("select status from jobkit.jobs where id = %s", (waiter,)) == "waiting"
    assert session.scalar("select count(*) from jobkit.job_waits") == 1


def test_keys_of_a_composite_primary_key_and_of_a_key_column(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(TABLES)
    by_customer = {"table": "orders", "on": ["insert"], "emit": "customer.ordered", "key": "customer",
                   "payload": "pk"}
    lines = {"table": "lines", "on": ["insert", "delete"], "emit": "line.changed", "payload": "pk"}
    _deploy(db_url, by_customer=by_customer, lines=lines)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("insert into orders (id, customer) values (1, 5), (2, 5), (3, null)")
        conn.execute("insert into lines values (10, 1, 'a'), (10, 2, 'b')")
        conn.execute("delete from lines where no = 2")
        rows = conn.execute("select name, key, generation, data from jobkit.events order by id").fetchall()
    assert [tuple(r) for r in rows] == [
        ("customer.ordered", "5", 1, {"id": 1}), ("customer.ordered", "5", 2, {"id": 2}),  # in row order
        ("customer.ordered", "", 1, {"id": 3}),  # a null key column: the null key, as emit's
        ("line.changed", "[10, 1]", 1, {"order": 10, "no": 1}),
        ("line.changed", "[10, 2]", 1, {"order": 10, "no": 2}),
        ("line.changed", "[10, 2]", 2, {"order": 10, "no": 2})]  # the delete: a new generation
    # the composite key is json.dumps of the key's values, in key order (what a waiter passes)
    assert rows[3][1] == json.dumps([10, 1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                         max_size=20), st.integers(-2**31, 2**31 - 1)),
                       min_size=1, max_size=5, unique=True))
def test_a_composite_key_is_json_dumps_of_its_values(keyed: str, values: list[tuple[str, int]]) -> None:
    with psycopg.connect(keyed, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("delete from jobkit.events")
            conn.execute("delete from public.pairs")
            with conn.cursor() as cur:
                cur.executemany("insert into public.pairs values (%s, %s)", values)
        got = [r[0] for r in conn.execute("select key from jobkit.events order by id").fetchall()]
    assert got == [json.dumps([a, b], ensure_ascii=False) for a, b in values]


@pytest.fixture
def keyed(db_url: str) -> str:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("create table public.pairs (a text, b int, primary key (a, b))")
    _deploy(db_url, pairs={"table": "pairs", "on": ["insert"], "emit": "pair", "payload": "pk"})
    return db_url


@pytest.mark.parametrize(("spec", "message"), [
    ({"type": "t", "emit": "e"}, "needs either type or emit, not both"),
    ({}, "needs type or emit"),
    ({"emit": "e", "idempotency": "pk"}, "idempotency applies to job triggers, not to emit"),
    ({"type": "t", "key": "id"}, "key names an emit trigger's event key"),
    ({"emit": "e", "key": "a b"}, "key must be a column name"),
    ({"emit": ""}, "emit must be an event name of 1 to 200 characters"),
    ({"emit": "x" * 201}, "emit must be an event name of 1 to 200 characters"),
    ({"emit": "a\x1fb"}, "emit must be an event name of 1 to 200 characters"),
    ({"emit": "a$jobkit_trigger$; drop table orders; --"}, "emit must not contain $jobkit_trigger$"),
    ({"emit": "/*jobkit:pk_key:new*/"}, "emit must not contain"),
])
def test_config_errors_are_one_line_naming_the_fix(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"triggers": {"t": {"table": "orders", "on": ["insert"], **spec}}})
    assert message in str(err.value) and "[triggers.t]" in str(err.value) and err.value.hint
    assert "\n" not in str(err.value)


def test_a_key_column_the_table_lacks_is_refused_before_anything_is_applied(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(TABLES)
    bad = {"table": "orders", "on": ["insert"], "emit": "e", "key": "nope"}
    with pytest.raises(DeployError, match=r"\[triggers.bad\] key column 'nope' is not a column of public.orders"):
        _deploy(db_url, placed=PLACED, bad=bad)
    assert _scalar(db_url, "select count(*) from pg_trigger where tgrelid = 'orders'::regclass "
                           "and not tgisinternal") == 0


def test_list_doctor_check_and_a_change_from_type_to_emit(shop: str, session: Session) -> None:
    session.execute("insert into orders (id) select g from generate_series(1, 3) g")
    rows = json.loads(CliRunner().invoke(cli, ["triggers", "list", "--json", "--db-url", shop]).output)
    placed = next(r for r in rows if r["name"] == "placed")
    assert (placed["emit"], placed["type"], placed["events_last_hour"], placed["jobs_last_hour"]) == (
        "order.placed", None, 3, 0)
    table = CliRunner().invoke(cli, ["triggers", "list", "--db-url", shop]).output
    assert "event order.placed" in table and "3 events" in table
    assert _deploy(shop, EVENTS, check=True, paid=PAID, placed=PLACED) == []
    checks = doctor.run(Database(shop), _settings(shop, EVENTS, paid=PAID, placed=PLACED))
    assert next(c for c in checks if c.name == "row triggers").status == doctor.PASS
    # the same trigger made to enqueue a type: its function is replaced, the trigger kept
    as_type = {k: v for k, v in PLACED.items() if k != "emit"} | {"type": "order_placed"}
    oid = session.scalar("select oid from pg_trigger where tgname = 'jobkit_placed_ins'")
    assert _deploy(shop, EVENTS, paid=PAID, placed=as_type) == ["trigger placed (insert on public.orders) changed"]
    assert session.scalar("select oid from pg_trigger where tgname = 'jobkit_placed_ins'") == oid
    session.execute("insert into orders (id) values (4)")
    assert session.scalar("select jobkit.move_row_inbox()") == 1
    assert session.scalar("select count(*) from jobkit.jobs where type = 'order_placed'") == 1
    assert session.scalar("select count(*) from jobkit.events where name = 'order.placed'") == 3


def test_ten_thousand_rows_in_one_statement_take_one_lock_for_the_name(shop: str) -> None:
    """A lock per key would be 10,000 advisory locks, past the default shared lock table."""
    assert _scalar(shop, "select current_setting('max_locks_per_transaction')::int") <= 64
    with psycopg.connect(shop) as conn:
        conn.execute("insert into orders (id) select g from generate_series(1, 10000) g")
        locks = conn.execute("select count(*) from pg_locks where locktype = 'advisory' "
                             "and pid = pg_backend_pid()").fetchone()
    assert locks == (1,)
    assert _scalar(shop, "select count(*) from jobkit.events where name = 'order.placed'") == 10_000


def test_a_wait_registered_during_a_bulk_emit_waits_for_it_and_sees_its_event(shop: str) -> None:
    job = _scalar(shop, "select jobkit.enqueue('on.placed', '{}')")
    claimed = _scalar(shop, "select attempts from jobkit.claim_jobs('on.placed', 1, 'w', '5 min')")
    result: list[Any] = []
    with psycopg.connect(shop) as emitter:
        emitter.execute("insert into orders (id) select g from generate_series(1, 100) g")  # > 64 keys

        def register() -> None:
            result.append(_scalar(shop, "select jobkit.suspend_job(%s, %s, 'w', 1, 'event', "
                                        "array['order.placed'], array['5'])", (job, claimed)))

        thread = threading.Thread(target=register)
        thread.start()
        blocked = ("select count(*) from pg_locks where locktype = 'advisory' and not granted")
        for _ in range(600):
            if _scalar(shop, blocked) == 1 or not thread.is_alive():
                break
            time.sleep(0.05)
        assert _scalar(shop, blocked) == 1 and not result  # it waits for the emitting transaction
        emitter.commit()
    thread.join(timeout=30)
    assert result == ["pending"]  # then sees the event (latch): resumed at once
    assert _scalar(shop, "select result->>'key' from jobkit.job_steps where job_id = %s", (job,)) == "5"


def test_an_event_name_with_quotes_and_a_newline_is_emitted_verbatim(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(TABLES)
    name = "order's\nselect 1/0; -- paid"  # once in a comment of the rendered SQL: it ran
    _deploy(db_url, odd={"table": "orders", "on": ["insert"], "emit": name, "payload": "pk"})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("insert into orders (id) values (1)")
    assert _scalar(db_url, "select name from jobkit.events") == name
    assert _scalar(db_url, "select count(*) from orders") == 1
