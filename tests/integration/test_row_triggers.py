"""Declared row triggers (issue 24): a row change on an app table is staged in the same
transaction (jobkit.row_inbox, 0026), through a statement-level trigger that writes once per
statement and wakes the type's worker, and becomes a job when the type is claimed or the stuck
sweep runs (move_row_inbox, sql/functions/72_row_inbox.sql). Jobs are counted after that move.
Real PostgreSQL; every assertion is on what the database did (jobs, wake-ups, the catalog). Insert throughput is
in bench.triggers (docs/BENCHMARKS.md "Issue 24: row triggers"); the crash test against a per-row
pg_net webhook is in tests/faults/test_trigger_crash.py."""

from __future__ import annotations

import json
import re
import threading
import uuid
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings, parse_settings
from jobkit.connector import Database
from jobkit.exceptions import DeployError, DriftError
from jobkit.ops import doctor
from jobkit.ops.triggers import list_triggers
from jobkit.schema.deploy import DeployOptions, deploy
from psycopg import sql as psql

ORDERS = "create table public.orders (id bigint primary key, status text not null default 'new', email text)"
RECEIPT = {"table": "public.orders", "on": ["update"], "type": "send_receipt", "payload": "row",
           "when": "new.status = 'paid' and old.status is distinct from 'paid'", "idempotency": "pk"}
PLACED = {"table": "orders", "on": ["insert"], "type": "order_placed", "payload": ["id", "email"]}


def _settings(url: str, **triggers: dict[str, Any]) -> Settings:
    return parse_settings({"db_url": url, "triggers": triggers})


def _deploy(url: str, check: bool = False, **triggers: dict[str, Any]) -> list[str]:
    report = deploy(Database(url), _settings(url, **triggers), DeployOptions(schedules=False, check=check),
                    echo=lambda _m: None)
    return report.triggers_changed


def _scalar(url: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def _moved(url: str) -> int:
    """The staged rows made into jobs, as a claim or the stuck sweep does (move_row_inbox)."""
    return int(_scalar(url, "select jobkit.move_row_inbox()"))


def _jobs(url: str, job_type: str) -> int:
    _moved(url)
    return int(_scalar(url, "select count(*) from jobkit.jobs where type = %s", (job_type,)))


@pytest.fixture
def shop(db_url: str) -> str:
    """jobkit deployed with a placed trigger (insert) and a receipt trigger (update, when, idempotent)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(ORDERS)
    _deploy(db_url, placed=PLACED, receipt=RECEIPT)
    return db_url


def test_ten_thousand_rows_in_one_statement_are_ten_thousand_jobs_and_one_wake_up(shop: str) -> None:
    with psycopg.connect(shop, autocommit=True) as listener, psycopg.connect(shop, autocommit=True) as conn:
        listener.execute("listen jobkit_wake")
        conn.execute("insert into orders (id, email) select g, 'u' || g || '@x' from generate_series(1, 10000) g")
        wakes = [json.loads(n.payload) for n in listener.notifies(timeout=1.0)]
    assert _jobs(shop, "order_placed") == 10_000
    mine = [w for w in wakes if w.get("type") == "order_placed"]
    fanout = int(_scalar(shop, "select (value #>> '{}')::int from jobkit.settings where key = 'max_fanout'"))
    assert len(mine) == 1, mine  # one wake-up for the statement (one NOTIFY asking for its calls)
    assert 1 <= mine[0]["calls"] <= 1 + fanout
    source = _scalar(shop, "select source from jobkit.jobs where type = 'order_placed' and payload->>'id' = '42'")
    assert source == {"trigger": "placed", "table": "public.orders", "op": "insert", "pk": {"id": 42}}
    assert _scalar(shop, "select payload from jobkit.jobs where source->'pk'->>'id' = '7'") == {
        "id": 7, "email": "u7@x"}


def test_single_row_transactions_each_make_their_job(shop: str) -> None:
    n = 10_000
    with psycopg.connect(shop, autocommit=True) as conn:
        for i in range(n):
            conn.execute("insert into orders (id, email) values (%s, %s)", (i, f"{i}@x"))
    assert _scalar(shop, "select count(*) from jobkit.jobs") == 0  # staged, not jobs yet
    assert _jobs(shop, "order_placed") == n
    assert _scalar(shop, "select count(distinct source->'pk') from jobkit.jobs") == n


def test_a_rolled_back_change_makes_no_job(shop: str) -> None:
    with psycopg.connect(shop) as conn:
        conn.execute("insert into orders (id) select g from generate_series(1, 100) g")
        conn.execute("update orders set status = 'paid'")
        conn.rollback()
    assert _scalar(shop, "select count(*) from jobkit.row_inbox") == 0
    assert _moved(shop) == 0
    assert _scalar(shop, "select count(*) from jobkit.jobs") == 0


def test_an_update_that_does_not_match_when_makes_no_job(shop: str) -> None:
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id, status) select g, 'paid' from generate_series(1, 50) g")
        conn.execute("update orders set status = 'paid'")     # was paid already: old.status = 'paid'
        conn.execute("update orders set email = 'changed'")    # status stays paid
        conn.execute("update orders set status = 'shipped'")   # not paid
        assert _jobs(shop, "send_receipt") == 0
        conn.execute("update orders set status = 'paid' where id <= 5")  # shipped -> paid: matches
    assert _jobs(shop, "send_receipt") == 5


def test_idempotency_on_the_primary_key_holds_under_sixteen_concurrent_updaters(shop: str) -> None:
    rows = 20
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id) select g from generate_series(1, %s) g", (rows,))
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def updater(k: int) -> None:
        try:
            with psycopg.connect(shop, autocommit=True) as conn:
                start.wait()
                for _round in range(5):
                    for i in range(rows):  # each updater in an order of its own, one row per transaction
                        row_id = 1 + (i + k) % rows
                        # flip paid <-> new: every flip to paid matches `when`
                        conn.execute("update orders set status = case when status = 'paid' then 'new' "
                                     "else 'paid' end where id = %s", (row_id,))
                    conn.execute("select jobkit.move_row_inbox('send_receipt')")  # 16 concurrent movers
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=updater, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    _moved(shop)
    per_row = _scalar(shop, "select max(n) from (select count(*) as n from jobkit.jobs where type = 'send_receipt'"
                            " and status in ('pending', 'processing') group by idempotency_key) c")
    assert per_row == 1  # one unfinished job per row and trigger, however many updates matched
    assert _jobs(shop, "send_receipt") == rows


def test_a_trigger_on_an_auth_users_table_owned_by_another_role(cluster: Any, admin: Any, fresh_db: str) -> None:
    """As on Supabase: jobkit's owner is no superuser, auth.users belongs to the auth admin, and the
    owner holds only TRIGGER on it (plus USAGE on the schema)."""
    owner, auth = f"jk_owner_{uuid.uuid4().hex[:6]}", f"jk_auth_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        for role in (owner, auth):
            conn.execute(psql.SQL("create role {} login").format(psql.Identifier(role)))
        conn.execute(psql.SQL("grant create on database {} to {}").format(
            psql.Identifier(conn.info.dbname), psql.Identifier(owner)))
        conn.execute(psql.SQL("create schema auth authorization {}").format(psql.Identifier(auth)))
        conn.execute("create table auth.users (id uuid primary key default gen_random_uuid(), email text,"
                     " raw_user_meta_data jsonb)")
        conn.execute(psql.SQL("alter table auth.users owner to {}").format(psql.Identifier(auth)))
        conn.execute(psql.SQL("grant usage on schema auth to {}").format(psql.Identifier(owner)))
    owner_url = fresh_db.replace("postgres@", f"{owner}@")
    auth_url = fresh_db.replace("postgres@", f"{auth}@")
    welcome = {"table": "auth.users", "on": ["insert"], "type": "send_welcome", "payload": ["id", "email"]}
    try:
        with pytest.raises(DeployError, match=f"role {owner} cannot create triggers on auth.users") as caught:
            _deploy(owner_url, welcome=welcome)  # no TRIGGER yet: refused before anything is applied
        assert f"GRANT TRIGGER ON auth.users TO {owner}" in caught.value.hint
        assert _scalar(fresh_db, "select count(*) from pg_namespace where nspname = 'jobkit'") == 0
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute(psql.SQL("grant trigger on auth.users to {}").format(psql.Identifier(owner)))
        assert _deploy(owner_url, welcome=welcome) == ["trigger welcome (insert on auth.users) added"]
        with psycopg.connect(auth_url, autocommit=True) as conn:  # the auth service signs a user up
            user = conn.execute("insert into auth.users (email) values ('ada@example.com') returning id").fetchone()
        assert user is not None
        assert _moved(owner_url) == 1  # as jobkit's owner, as the claim or the stuck sweep runs it
        job = _scalar(fresh_db, "select jsonb_build_object('payload', payload, 'source', source) from jobkit.jobs")
        assert job == {"payload": {"id": str(user[0]), "email": "ada@example.com"},
                       "source": {"trigger": "welcome", "table": "auth.users", "op": "insert",
                                  "pk": {"id": str(user[0])}}}
        assert _scalar(fresh_db, "select p.prosecdef and p.proowner::regrole::text = %s and p.proconfig = "
                       "array['search_path=\"\"'] from pg_proc p where p.proname = 'rowtrigger_welcome_ins'",
                       (owner,)) is True
        # a change of `when` replaces the function only: the owner may not touch the trigger itself
        assert _deploy(owner_url, welcome={**welcome, "when": "new.email like '%@example.com'"}) == [
            "trigger welcome (insert on auth.users) changed"]
        with psycopg.connect(auth_url, autocommit=True) as conn:
            conn.execute("insert into auth.users (email) values ('bot@elsewhere.org'), ('bo@example.com')")
        assert _jobs(fresh_db, "send_welcome") == 2
        assert _deploy(owner_url, check=True, welcome={**welcome, "when": "new.email like '%@example.com'"}) == []
        with pytest.raises(DeployError, match="only .* may drop trigger jobkit_welcome_ins"):
            _deploy(owner_url)  # removing it needs the table's owner: refused before anything is applied
        assert _scalar(fresh_db, "select count(*) from pg_trigger where tgname = 'jobkit_welcome_ins'") == 1
    finally:
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("drop schema if exists auth cascade")
            conn.execute("drop schema if exists jobkit cascade")
            for role in (owner, auth):
                conn.execute(psql.SQL("drop owned by {}").format(psql.Identifier(role)))
                conn.execute(psql.SQL("drop role {}").format(psql.Identifier(role)))


@pytest.mark.parametrize(("change", "message"), [
    ({"table": "public.nope"}, r"\[triggers.placed\] table public.nope does not exist"),
    ({"payload": ["id", "mail"]}, r"payload column 'mail' is not a column of public.orders"),
    ({"when": "new.stauts = 'paid'"}, r"\[triggers.placed\] does not compile .*stauts"),
    ({"when": "new.status"}, r"\[triggers.placed\] does not compile .*boolean"),
    ({"when": "old.status = 'x'"}, r"\[triggers.placed\] does not compile"),
    ({"table": "public.orders_view"}, r"is not a table"),
    ({"table": "public.no_pk"}, r"has no primary key"),
])
def test_a_bad_trigger_is_one_line_and_nothing_is_applied(db_url: str, change: dict[str, Any],
                                                          message: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(ORDERS)
        conn.execute("create view orders_view as select * from orders")
        conn.execute("create table no_pk (id int)")
    head = _scalar(db_url, "select max(version) from jobkit.schema_migrations")
    with pytest.raises(DeployError, match=message) as caught:
        _deploy(db_url, placed={**PLACED, **change}, receipt=RECEIPT)
    assert "\n" not in caught.value.message and caught.value.hint
    assert _scalar(db_url, "select count(*) from pg_trigger where tgname like 'jobkit\\_%'") == 0
    assert _scalar(db_url, "select count(*) from jobkit.row_triggers") == 0
    assert _scalar(db_url, "select max(version) from jobkit.schema_migrations") == head


def test_deploy_manages_its_triggers_and_never_others(shop: str) -> None:
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("create function public.audit() returns trigger language plpgsql as "
                     "$$ begin return null; end $$")
        conn.execute("create trigger app_audit after insert on orders for each row execute function public.audit()")
    assert _deploy(shop, check=True, placed=PLACED, receipt=RECEIPT) == []
    # changed payload: the function is replaced, the trigger kept (same oid)
    oid = _scalar(shop, "select oid from pg_trigger where tgname = 'jobkit_placed_ins'")
    assert _deploy(shop, placed={**PLACED, "payload": "pk"}, receipt=RECEIPT) == [
        "trigger placed (insert on public.orders) changed"]
    assert _scalar(shop, "select oid from pg_trigger where tgname = 'jobkit_placed_ins'") == oid
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id) values (1)")
    assert _moved(shop) == 1
    assert _scalar(shop, "select payload from jobkit.jobs") == {"id": 1}
    # removed from jobkit.toml: dropped with its function; the app's own trigger stays
    assert _deploy(shop, receipt=RECEIPT) == ["trigger placed (insert on public.orders) removed"]
    names = _scalar(shop, "select array_agg(tgname::text order by tgname) from pg_trigger "
                          "where tgrelid = 'orders'::regclass")
    assert names == ["app_audit", "jobkit_receipt_upd"]
    assert _scalar(shop, "select count(*) from pg_proc where proname = 'rowtrigger_placed_ins'") == 0


def test_deploy_check_and_doctor_see_a_trigger_dropped_disabled_or_altered(shop: str) -> None:
    triggers = {"placed": PLACED, "receipt": RECEIPT}
    tamper = {
        "dropped": "drop trigger jobkit_placed_ins on orders",
        "disabled": "alter table orders disable trigger jobkit_placed_ins",
        "altered outside jobkit": "create or replace function jobkit.rowtrigger_placed_ins() returns trigger "
                                  "language plpgsql as $$ begin return null; end $$",
    }
    for state, statement in tamper.items():
        with psycopg.connect(shop, autocommit=True) as conn:
            conn.execute(statement)
        with pytest.raises(DriftError, match=f"trigger placed \\(insert on public.orders\\): {state}"):
            _deploy(shop, check=True, **triggers)
        checks = {c.name: c for c in doctor.run(Database(shop), _settings(shop, **triggers))}
        assert checks["row triggers"].status == doctor.FAIL
        assert _deploy(shop, **triggers) == ["trigger placed (insert on public.orders) changed"]
        assert _deploy(shop, check=True, **triggers) == []
        with psycopg.connect(shop, autocommit=True) as conn:
            conn.execute("insert into orders (id) values (%s)", (len(state),))
    assert _jobs(shop, "order_placed") == len(tamper)
    checks = {c.name: c for c in doctor.run(Database(shop), _settings(shop, **triggers))}
    assert checks["row triggers"].status == doctor.PASS


def test_triggers_list_shows_table_events_condition_type_and_jobs_of_the_last_hour(shop: str) -> None:
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id) select g from generate_series(1, 7) g")
        conn.execute("update orders set status = 'paid' where id <= 3")
    rows = {r.name: r for r in list_triggers(Database(shop), _settings(shop))}
    assert (rows["placed"].table, rows["placed"].events, rows["placed"].jobs_last_hour) == (
        "public.orders", ("insert",), 7)
    assert (rows["receipt"].condition, rows["receipt"].type, rows["receipt"].jobs_last_hour) == (
        RECEIPT["when"], "send_receipt", 3)
    result = CliRunner().invoke(cli, ["triggers", "list", "--json", "--db-url", shop])
    assert result.exit_code == 0, result.output
    assert {r["name"]: r["jobs_last_hour"] for r in json.loads(result.output)} == {"placed": 7, "receipt": 3}
    assert _moved(shop) == 10  # staged rows counted above; as jobs now, the same counts
    rows = {r.name: r for r in list_triggers(Database(shop), _settings(shop))}
    assert (rows["placed"].jobs_last_hour, rows["receipt"].jobs_last_hour) == (7, 3)


def test_the_dashboard_has_a_triggers_section(shop: str) -> None:
    from jobkit.dashboard.app import Dashboard
    from starlette.testclient import TestClient

    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id) select g from generate_series(1, 4) g")
        conn.execute("alter table orders disable trigger jobkit_receipt_upd")
    dashboard = Dashboard(shop, Settings(db_url=shop))
    try:
        with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False) as client:
            page = client.get("/triggers", headers={"accept": "text/html"})
    finally:
        dashboard.close()
    assert page.status_code == 200, page.text[:300]
    rows = re.findall(r"<tr><td>(\w+)</td><td>([\w.]+)</td>.*?<td class=\"num\">(\d+)</td></tr>", page.text, re.S)
    assert rows == [("placed", "public.orders", "4"), ("receipt", "public.orders", "0")]
    assert "<strong>disabled</strong>" in page.text


def test_staged_rows_become_jobs_through_the_claim_the_sweep_and_a_removal(shop: str) -> None:
    """Off the inserting transaction, each path a staged row takes to be a job: the claim of its type
    (a worker woken by the trigger), next_due (a worker going idle looks once more), the stuck sweep
    (the backstop for a lost wake-up), and deploy removing the trigger (its source kept)."""
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id, email) select g, g || '@x' from generate_series(1, 30) g")
        assert _scalar(shop, "select count(*) from jobkit.jobs") == 0
        assert _scalar(shop, "select count(*) from jobkit.row_inbox") == 30
        assert _scalar(shop, "select jobkit.next_due('order_placed') <= now()") is True
        assert _scalar(shop, "select jobkit.next_due('send_receipt')") is None  # nothing staged for it
        claimed = conn.execute("select payload from jobkit.claim_jobs('order_placed', 10, 'w', '1 minute')").fetchall()
        assert len(claimed) == 10  # the claim moved all 30, then claimed 10 of them
        assert _scalar(shop, "select count(*) from jobkit.row_inbox") == 0
        assert _jobs(shop, "order_placed") == 30
        conn.execute("update orders set status = 'paid' where id <= 4")
        conn.execute("select count(*) from jobkit.sweep_stuck()")
        assert _scalar(shop, "select count(*) from jobkit.jobs where type = 'send_receipt'") == 4
        conn.execute("update orders set status = 'new'")
        conn.execute("update orders set status = 'paid' where id = 5")
    assert _scalar(shop, "select count(*) from jobkit.row_inbox") == 1
    assert _deploy(shop, placed=PLACED) == ["trigger receipt (update on public.orders) removed"]
    assert _scalar(shop, "select count(*) from jobkit.row_inbox") == 0
    assert _scalar(shop, "select source from jobkit.jobs where idempotency_key = 'receipt:{\"id\": 5}'") == {
        "trigger": "receipt", "table": "public.orders", "op": "update", "pk": {"id": 5}}


def test_a_staged_array_an_older_object_and_a_wide_payload_make_the_same_jobs(shop: str) -> None:
    """A trigger stages its columns as one json array (sql/row_trigger.sql's staged()); a row staged
    before that as an object keyed f1, f2, ... (still in the inbox when deploy replaced the trigger),
    and a payload past json_build_array's 100 arguments, staged as such an object, make the same
    jobs: the move (move_row_inbox) reads both shapes."""
    wide = [f"c{i}" for i in range(1, 101)]
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute(psql.SQL("create table public.wide (id bigint primary key, {})").format(
            psql.SQL(", ").join(psql.SQL("{} int").format(psql.Identifier(c)) for c in wide)))
    _deploy(shop, placed=PLACED, receipt=RECEIPT,
            wide={"table": "public.wide", "on": ["insert"], "type": "wide_row", "payload": wide})
    with psycopg.connect(shop, autocommit=True) as conn:
        conn.execute("insert into orders (id, email) values (1, '1@x')")
        conn.execute("insert into jobkit.row_inbox (name, op, type, staged) "
                     "values ('placed', 'insert', 'order_placed', '{\"f1\": 2, \"f2\": \"2@x\"}')")
        conn.execute(psql.SQL("insert into public.wide (id, {}) values (7, {})").format(
            psql.SQL(", ").join(map(psql.Identifier, wide)), psql.SQL(", ").join([psql.Placeholder()] * 100)),
            list(range(1, 101)))
        shapes = conn.execute("select type, json_typeof(staged) from jobkit.row_inbox").fetchall()
    assert sorted(shapes) == [("order_placed", "array"), ("order_placed", "object"), ("wide_row", "object")]
    assert _moved(shop) == 3
    with psycopg.connect(shop, autocommit=True) as conn:
        placed = conn.execute("select payload, source from jobkit.jobs where type = 'order_placed' "
                              "order by payload->>'id'").fetchall()
        (wide_payload, wide_source), = conn.execute(
            "select payload, source from jobkit.jobs where type = 'wide_row'").fetchall()
    assert placed == [({"id": i, "email": f"{i}@x"},
                       {"trigger": "placed", "table": "public.orders", "op": "insert", "pk": {"id": i}})
                      for i in (1, 2)]
    assert wide_payload == {c: i for i, c in enumerate(wide, start=1)}
    assert wide_source["pk"] == {"id": 7}
