"""Declared row triggers through `jobkit render` and `jobkit render --supabase` (issue 24): the
rendered files, applied by psql to a fresh database, make the triggers deploy makes (the primary
key read from the catalog as the script runs), record them with deploy's checksums (deploy --check
agrees), change nothing when run again, refuse a bad declaration in one line with nothing applied,
and a later functions file leaves them alone."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings, parse_settings
from jobkit.connector import Database
from jobkit.ops.localdb import find_pg_bin
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.schema.supabase_cli import write_functions, write_migration, write_triggers

TABLES = ("create table public.orders (id bigint primary key, status text not null default 'new', email text);"
          "create table public.\"LineItems\" (\"order\" bigint, \"no\" int, sku text, primary key (\"order\", \"no\"))")
PLACED = {"table": "orders", "on": ["insert"], "type": "order_placed", "payload": ["id", "email"]}
RECEIPT = {"table": "public.orders", "on": ["update"], "type": "send_receipt", "payload": "row",
           "when": "new.status = 'paid' and old.status is distinct from 'paid'", "idempotency": "pk"}
LINES = {"table": "public.LineItems", "on": ["insert", "delete"], "type": "line_changed", "payload": "pk"}
WHEN = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def _settings(url: str, **triggers: dict[str, Any]) -> Settings:
    return parse_settings({"db_url": url, "triggers": triggers})


def _psql(url: str, path: Path, *, single: bool = False) -> subprocess.CompletedProcess[str]:
    args = [str(find_pg_bin() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", str(path)]
    return subprocess.run([*args, *(["--single-transaction"] if single else [])],
                          capture_output=True, text=True, timeout=120, check=False)


def _one(url: str, query: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def _row(url: str, query: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return tuple(row)


def _tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TABLES)


def _check(url: str, **triggers: dict[str, Any]) -> list[str]:
    """deploy --check's row-trigger findings (raises DriftError on any)."""
    report = deploy(Database(url), _settings(url, **triggers), DeployOptions(schedules=False, check=True),
                    echo=lambda _m: None)
    return report.triggers_changed


def _render(tmp_path: Path, **triggers: dict[str, Any]) -> Path:
    config = tmp_path / "jobkit.toml"
    lines = []
    for name, spec in triggers.items():
        lines.append(f"[triggers.{name}]")
        lines += [f"{key} = {_toml(value)}" for key, value in spec.items()]
    config.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(cli, ["-c", str(config), "render"])
    assert result.exit_code == 0, result.output
    script = tmp_path / "jobkit.sql"
    script.write_text(result.output)
    return script


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_jobkit_render_applied_by_psql_makes_the_triggers_deploy_makes(tmp_path: Path, fresh_db: str) -> None:
    _tables(fresh_db)
    script = _render(tmp_path, placed=PLACED, receipt=RECEIPT, lines=LINES)
    done = _psql(fresh_db, script)
    assert done.returncode == 0, done.stderr
    names = _one(fresh_db, "select array_agg(tgname::text order by tgname) from pg_trigger where not tgisinternal "
                           "and tgrelid in ('orders'::regclass, '\"LineItems\"'::regclass)")
    assert names == ["jobkit_lines_del", "jobkit_lines_ins", "jobkit_placed_ins", "jobkit_receipt_upd"]
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("insert into orders (id, email) select g, g || '@x' from generate_series(1, 100) g")
        conn.execute("update orders set status = 'paid' where id <= 10")
        conn.execute("insert into \"LineItems\" values (1, 1, 'a'), (1, 2, 'b')")
        conn.execute("delete from \"LineItems\" where \"no\" = 2")
    assert _one(fresh_db, "select jobkit.move_row_inbox()") == 113  # staged rows become jobs (claim, sweep)
    counts = dict(_one(fresh_db, "select jsonb_object_agg(type, n) from (select type, count(*) n from jobkit.jobs "
                                 "group by type) c"))
    assert counts == {"order_placed": 100, "send_receipt": 10, "line_changed": 3}
    assert _one(fresh_db, "select source from jobkit.jobs where type = 'line_changed' and source->>'op' = 'delete'") == {
        "trigger": "lines", "table": "public.LineItems", "op": "delete", "pk": {"order": 1, "no": 2}}
    assert _one(fresh_db, "select payload from jobkit.jobs where source->'pk'->>'id' = '7' "
                          "and type = 'order_placed'") == {"id": 7, "email": "7@x"}
    # deploy renders the same functions from the same catalog: same checksums, nothing to do
    assert _check(fresh_db, placed=PLACED, receipt=RECEIPT, lines=LINES) == []


def test_the_supabase_files_make_change_and_remove_the_triggers(tmp_path: Path, fresh_db: str) -> None:
    _tables(fresh_db)
    settings = _settings(fresh_db, placed=PLACED, receipt=RECEIPT)
    files = [write_migration(settings, tmp_path, now=WHEN), write_functions(settings, tmp_path, now=WHEN),
             write_triggers(settings, tmp_path, now=WHEN)]
    assert files[2] == tmp_path / "migrations" / "20261206120000_jobkit_triggers.sql"
    assert sorted(files, key=str) == files  # the CLI applies them in name order: triggers after functions
    for path in files:
        assert path is not None
        done = _psql(fresh_db, path, single=True)  # as the Supabase CLI: each file one transaction
        assert done.returncode == 0, done.stderr
    assert write_triggers(settings, tmp_path) is None  # nothing new
    assert _check(fresh_db, placed=PLACED, receipt=RECEIPT) == []
    trigger_oid = _one(fresh_db, "select oid from pg_trigger where tgname = 'jobkit_placed_ins'")
    function = "select oid, xmin::text, md5(pg_get_functiondef(oid)) from pg_proc where proname = 'rowtrigger_placed_ins'"
    before = _row(fresh_db, function)

    # the same file again changes nothing
    assert _psql(fresh_db, files[2], single=True).returncode == 0
    assert _row(fresh_db, function) == before
    # a functions file applied again (its grants touch every function's row) leaves them in place
    assert _psql(fresh_db, files[1], single=True).returncode == 0
    assert _row(fresh_db, function)[::2] == before[::2]
    assert _one(fresh_db, "select oid from pg_trigger where tgname = 'jobkit_placed_ins'") == trigger_oid
    assert _check(fresh_db, placed=PLACED, receipt=RECEIPT) == []
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("insert into orders (id) values (1)")
    assert _one(fresh_db, "select jobkit.move_row_inbox()") == 1
    assert _one(fresh_db, "select count(*) from jobkit.jobs where type = 'order_placed'") == 1

    # a changed `when` and a removed trigger: a new file replaces the function and drops the other
    receipt = {**RECEIPT, "when": "new.status = 'paid'"}
    changed = write_triggers(_settings(fresh_db, receipt=receipt), tmp_path, now=WHEN.replace(hour=13))
    assert changed is not None
    done = _psql(fresh_db, changed, single=True)
    assert done.returncode == 0, done.stderr
    assert _one(fresh_db, "select count(*) from pg_trigger where tgname = 'jobkit_placed_ins'") == 0
    assert _one(fresh_db, "select count(*) from pg_proc where proname = 'rowtrigger_placed_ins'") == 0
    assert _one(fresh_db, "select array_agg(name) from jobkit.row_triggers") == ["receipt"]
    assert _check(fresh_db, receipt=receipt) == []
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("update orders set status = 'paid'")
        conn.execute("update orders set status = 'paid'")  # matches the new `when` again
    assert _one(fresh_db, "select jobkit.move_row_inbox()") == 2
    assert _one(fresh_db, "select count(*) from jobkit.jobs where type = 'send_receipt'") == 1  # idempotency pk

    # none declared any more: one more file removes the last
    gone = write_triggers(_settings(fresh_db), tmp_path, now=WHEN.replace(hour=14))
    assert gone is not None and _psql(fresh_db, gone, single=True).returncode == 0
    assert _one(fresh_db, "select count(*) from pg_trigger where tgname like 'jobkit\\_%'") == 0
    assert _one(fresh_db, "select count(*) from jobkit.row_triggers") == 0


def test_a_project_without_triggers_gets_no_triggers_file(tmp_path: Path) -> None:
    assert write_triggers(Settings(), tmp_path) is None
    assert "row_triggers_apply" not in CliRunner().invoke(cli, ["render"]).output


@pytest.mark.parametrize(("change", "message"), [
    ({"table": "public.nope"}, r"\[triggers.placed\] table public.nope does not exist"),
    ({"payload": ["id", "mail"]}, r"\[triggers.placed\] payload column 'mail' is not a column of public.orders"),
    ({"when": "new.stauts = 'paid'"}, r"\[triggers.placed\] does not compile on public.orders \(insert\): .*stauts"),
    ({"when": "old.status = 'x'"}, r"\[triggers.placed\] does not compile"),
    ({"table": "public.no_pk"}, r"\[triggers.placed\] public.no_pk has no primary key"),
    ({"table": "public.orders_view"}, r"\[triggers.placed\] public.orders_view is not a table"),
])
def test_a_bad_declaration_is_one_line_and_nothing_is_applied(tmp_path: Path, fresh_db: str,
                                                              change: dict[str, Any], message: str) -> None:
    import re

    _tables(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("create view orders_view as select * from orders")
        conn.execute("create table no_pk (id int)")
    script = _render(tmp_path, receipt=RECEIPT, placed={**PLACED, **change})
    done = _psql(fresh_db, script)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "ERROR:" in line]
    assert len(errors) == 1 and re.search(message, errors[0]), done.stderr
    assert "HINT:" in done.stderr
    # one transaction: not even jobkit's schema is left
    assert _one(fresh_db, "select count(*) from pg_namespace where nspname = 'jobkit'") == 0
    assert _one(fresh_db, "select count(*) from pg_trigger where tgname like 'jobkit\\_%'") == 0


def test_someone_elses_trigger_of_the_same_name_is_refused(tmp_path: Path, fresh_db: str) -> None:
    _tables(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("create function public.mine() returns trigger language plpgsql as $$ begin return null; end $$")
        conn.execute("create trigger jobkit_placed_ins after insert on orders for each statement "
                     "execute function public.mine()")
    done = _psql(fresh_db, _render(tmp_path, placed=PLACED))
    assert done.returncode != 0 and "jobkit does not manage it" in done.stderr
    assert _one(fresh_db, "select tgfoid::regproc::text from pg_trigger where tgname = 'jobkit_placed_ins'") == "mine"


# Emit triggers (issue 25, item 3): an event per row instead of a job; the key is the primary key
# (a composite one: the jsonb array of its values) or a declared column, filled in from the catalog.
PAID = {"table": "orders", "on": ["update"], "emit": "order.paid", "payload": "row",
        "when": "new.status = 'paid' and old.status is distinct from 'paid'"}
BY_EMAIL = {"table": "orders", "on": ["insert"], "emit": "order.by_email", "key": "email", "payload": ["id"]}
LINE_EVENTS = {"table": "public.LineItems", "on": ["insert", "delete"], "emit": "line.changed", "payload": "pk"}
EMITS = {"paid": PAID, "by_email": BY_EMAIL, "lines": LINE_EVENTS}


@pytest.mark.parametrize("how", ["render", "supabase"])
def test_emit_triggers_from_the_rendered_files_are_the_ones_deploy_makes(
    tmp_path: Path, fresh_db: str, other_fresh_db: str, how: str
) -> None:
    _tables(fresh_db)
    _tables(other_fresh_db)
    if how == "render":
        done = _psql(fresh_db, _render(tmp_path, **EMITS))
        assert done.returncode == 0, done.stderr
    else:
        settings = _settings(fresh_db, **EMITS)
        for path in (write_migration(settings, tmp_path, now=WHEN), write_functions(settings, tmp_path, now=WHEN),
                     write_triggers(settings, tmp_path, now=WHEN)):
            assert path is not None
            done = _psql(fresh_db, path, single=True)
            assert done.returncode == 0, done.stderr
    deploy(Database(other_fresh_db), _settings(other_fresh_db, **EMITS), DeployOptions(schedules=False),
           echo=lambda _m: None)
    made = ("select jsonb_object_agg(p.proname, md5(pg_get_functiondef(p.oid))) from pg_proc p "
            "where p.proname like 'rowtrigger\\_%'")
    recorded = "select jsonb_object_agg(name || ':' || op, checksum) from jobkit.row_triggers"
    assert _one(fresh_db, made) == _one(other_fresh_db, made)
    assert len(_one(fresh_db, made)) == 4
    assert _one(fresh_db, recorded) == _one(other_fresh_db, recorded)
    assert _check(fresh_db, **EMITS) == []
    for url in (fresh_db, other_fresh_db):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("insert into orders (id, email) values (1, 'a@x'), (2, 'b@x')")
            conn.execute("update orders set status = 'paid' where id = 2")
            conn.execute("insert into \"LineItems\" values (1, 1, 'a'), (1, 2, 'b')")
            conn.execute("delete from \"LineItems\" where \"no\" = 2")
    events = ("select jsonb_agg(jsonb_build_array(name, key, generation, data) order by id) from jobkit.events")
    assert _one(fresh_db, events) == _one(other_fresh_db, events) == [
        ["order.by_email", "a@x", 1, {"id": 1}], ["order.by_email", "b@x", 1, {"id": 2}],
        ["order.paid", "2", 1, {"id": 2, "email": "b@x", "status": "paid"}],
        ["line.changed", "[1, 1]", 1, {"order": 1, "no": 1}], ["line.changed", "[1, 2]", 1, {"order": 1, "no": 2}],
        ["line.changed", "[1, 2]", 2, {"order": 1, "no": 2}]]
    assert _one(fresh_db, "select count(*) from jobkit.jobs") == 0


def test_a_rendered_emit_trigger_with_a_missing_key_column_is_refused(tmp_path: Path, fresh_db: str) -> None:
    _tables(fresh_db)
    done = _psql(fresh_db, _render(tmp_path, by_email={**BY_EMAIL, "key": "mail"}))
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "ERROR:" in line]
    assert len(errors) == 1 and "[triggers.by_email] key column 'mail' is not a column of public.orders" in errors[0]
    assert "HINT:" in done.stderr
    assert _one(fresh_db, "select count(*) from pg_namespace where nspname = 'jobkit'") == 0
