"""sql/schema/ (the tables) plus sql/functions/ is exactly what the migrations plus sql/functions/
build: one database deployed by `jobkit deploy` (every migration from 0001, then the function
files), another from sql/schema/ and the same function files, compared object by object (tables,
columns and their order, constraints, indexes, functions with their bodies and settings, views,
triggers, policies, grants, comments) and by the rows the schema seeds (the defaults row of
job_types, the runtime settings)."""

from __future__ import annotations

import difflib
from datetime import timedelta
from pathlib import Path

import psycopg
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.schema.functions import apply as apply_functions
from jobkit.schema.render import render_bootstrap, render_tables

CATALOG = (Path(__file__).with_name("catalog.sql")).read_text()
FIXTURES = Path(__file__).parents[1] / "fixtures"
SEEDS = ("select type, max_attempts, lease, backoff_base, backoff_factor, backoff_cap, backoff_jitter, "
         "wake_on_insert, rate_limit from jobkit.job_types order by type",
         "select key, value from jobkit.settings order by key")


def describe(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        lines = [row[0] for row in conn.execute(CATALOG, {"schema": "jobkit"})]  # type: ignore[arg-type]
        for query in SEEDS:
            lines += [f"row {row!r}" for row in conn.execute(query)]  # type: ignore[arg-type]
    return lines


def drift(migrated: str, from_schema: str) -> str:
    """The differences, as a unified diff (empty when there is none)."""
    return "\n".join(difflib.unified_diff(describe(migrated), describe(from_schema), "migrations",
                                          "sql/schema", lineterm="", n=0))


def apply_schema_sql(url: str) -> None:
    """sql/schema/ in one transaction, then sql/functions/ the way deploy applies them."""
    settings = Settings(db_url=url)
    with Database(url).session() as session:
        with session.transaction():
            session.script(render_bootstrap(settings) + render_tables(settings))
        apply_functions(session, settings, lock_timeout=timedelta(seconds=10))


def migrate(url: str, *extra: Path) -> None:
    deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False, extra_migrations=extra),
           echo=lambda _m: None)


def test_the_tables_and_functions_are_what_the_migrations_build(fresh_db: str, other_fresh_db: str) -> None:
    migrate(fresh_db)
    apply_schema_sql(other_fresh_db)
    assert drift(fresh_db, other_fresh_db) == ""


def test_a_migration_that_the_tables_lack_is_drift(fresh_db: str, other_fresh_db: str) -> None:
    """The check can fail: a later migration (a column, an index) that sql/schema/ does not have
    shows up line by line."""
    migrate(fresh_db, FIXTURES / "migrations")
    apply_schema_sql(other_fresh_db)
    found = drift(fresh_db, other_fresh_db)
    assert "-column jobs.tenant" in found and "-index CREATE INDEX jobs_tenant_idx" in found
