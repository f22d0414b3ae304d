"""Every SQL file jobkit renders parses with PostgreSQL's own parser (pglast), no database needed
(issue 22, item 1): the tables (sql/schema/), the function files (sql/functions/, plpgsql bodies
included), the migrations, the upgrade bridges, the Data API and per-user API scripts, and the
Supabase form of the function files. The function files hold no Jinja logic: only the schema's
name, as an identifier or inside a literal."""

from __future__ import annotations

import re
from pathlib import Path

import pglast
import pytest
from jobkit.config import Settings, load_settings
from jobkit.schema import outside
from jobkit.schema.functions import statements
from jobkit.schema.render import (
    function_files,
    render_api,
    render_bridge,
    render_fresh_unit,
    render_function_file,
    render_functions,
    render_migrations,
    render_tables,
    render_user_api,
)
from jobkit.schema.supabase_cli import render_functions_replacement

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(schema="job kit")  # a name that must be quoted everywhere
_TEMPLATE_PART = re.compile(r"\{[{%#].*?[}%#]\}", re.S)
_ALLOWED = re.compile(r"\{\{ (s|\(schema ~ \"[a-z_.:]+\"\)( \| tojson)? \| literal|schema \| literal) \}\}")
# A fragment that a function and a worker query both run (the fenced insert of steps' records) is
# written once, as a macro in sql/shared/, and called by name: no other logic in a function file.
_SHARED_IMPORT = re.compile(r'\{% from "shared/[a-z_]+\.sql" import [a-z_]+(, [a-z_]+)* with context %\}')
_SHARED_CALL = re.compile(r"\{\{ [a-z_]+\((\s*[a-z_]+=\"[a-z_]+\",?)+\s*\)( \| indent\(\d+\))? \}\}")


def _user_api_settings(tmp_path: Path) -> Settings:
    path = tmp_path / "jobkit.toml"
    path.write_text('schema = "jobkit"\n[api]\nschema = "jobkit_api"\n[user_api]\nschema = "my_jobs"\n'
                    'types = ["report"]\n')
    return load_settings(path)


def _parse(sql: str) -> None:
    pglast.parse_sql(sql)


def test_the_tables_parse() -> None:
    _parse(render_tables(SETTINGS))


@pytest.mark.parametrize("name", function_files())
def test_each_function_file_parses(name: str) -> None:
    _parse(render_function_file(SETTINGS, name))


def test_every_plpgsql_body_parses() -> None:
    """(Rendered for schema public: libpg_query's plpgsql parser resolves only pg_catalog and public.)"""
    found = 0
    for sql in statements(Settings(schema="public")):
        if re.search(r"language plpgsql", sql, re.I) and re.match(r"(--[^\n]*\n)*create or replace function", sql):
            pglast.parse_plpgsql(sql)
            found += 1
    assert found > 25


def test_every_migration_parses() -> None:
    """Both forms: the transaction deploy runs plus each outside-transaction statement (its batch
    size bound), and the one-transaction form of a fresh install."""
    for migration in render_migrations(SETTINGS):
        proper, steps = outside.split(migration.sql)
        _parse(proper)
        for step in steps:
            _parse(step.sql.replace(outside.BATCH, "1000"))
        _parse(render_fresh_unit(SETTINGS, migration))


@pytest.mark.parametrize("step", ["delivery", "hot_path", "history"])
def test_each_upgrade_bridge_parses(step: str) -> None:
    _parse(render_bridge(SETTINGS, step))


def test_the_api_scripts_and_the_supabase_function_file_parse(tmp_path: Path) -> None:
    settings = _user_api_settings(tmp_path)
    for script in (render_api(settings), render_user_api(settings),
                   render_functions_replacement(settings, render_functions(settings))):
        assert script is not None
        _parse(script)


def test_the_function_files_hold_no_jinja_logic() -> None:
    for name in function_files():
        text = (ROOT / "sql" / "functions" / name).read_text()
        odd = [part for part in _TEMPLATE_PART.findall(text)
               if not any(r.fullmatch(part) for r in (_ALLOWED, _SHARED_IMPORT, _SHARED_CALL))]
        assert odd == [], f"{name}: {odd}"


def test_a_shared_macro_is_called_only_with_plain_names() -> None:
    """The allowance above is narrow: a call's arguments are the function's own parameter names."""
    assert _SHARED_CALL.fullmatch('{{ fenced_steps_insert(ids="p_ids", attempts="p_attempts") | indent(12) }}')
    assert not _SHARED_CALL.fullmatch('{{ fenced_steps_insert(ids="p_ids" ~ x) }}')
    assert not _SHARED_CALL.fullmatch('{% if x %}')


def test_a_file_that_does_not_parse_fails() -> None:
    with pytest.raises(pglast.parser.ParseError):
        _parse(render_function_file(SETTINGS, "10_policy.sql").replace("returns", "retruns", 1))


def test_the_row_trigger_script_parses() -> None:
    """sql/row_triggers_apply.sql (`jobkit render` with [triggers]), its plpgsql body included, and
    the CREATE TRIGGER it carries (the function it carries parses only once the script filled in
    the primary key: tests/integration/test_row_trigger_render.py runs it)."""
    from jobkit.config import parse_settings
    from jobkit.schema.trigger_script import declared, render_apply

    triggers = {"receipt": {"table": "public.orders", "on": ["insert", "update", "delete"], "type": "t",
                            "when": "old.status is distinct from 'paid'", "payload": "row", "idempotency": "pk"}}
    settings = parse_settings({"schema": "jobkit", "triggers": {
        "receipt": {**triggers["receipt"], "on": ["update"]}}})
    script = render_apply(settings)
    _parse(script)
    body = script.split("$jobkit_row_triggers_apply$")[1]
    pglast.parse_plpgsql(f"create function f(p_declared jsonb) returns void language plpgsql as $x${body}$x$")
    for entry in declared(parse_settings({"schema": "jobkit", "triggers": triggers})):
        _parse(entry["trigger_sql"])
