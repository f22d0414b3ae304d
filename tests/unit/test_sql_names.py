"""Every statement jobkit writes names each function, operator, type and relation with its schema
(issue 21, item 3): nothing it sends is resolved through the session's search_path, so nothing
planted in `public` (or on any path, in any order) can run in its place. The class is checked by
parsing, not a list of instances: tests/sqlnames.py reports every name the search_path would
decide. tests/integration/test_search_path.py runs the same check over every statement the
connector sent during every code path, and plants objects that must never run."""

from __future__ import annotations

from pathlib import Path

import pglast
import pytest
from jobkit.config import load_settings
from jobkit.cron import schedules as scheduling
from jobkit.cron.pg_cron import CronSite
from jobkit.queries import queries
from jobkit.schema import render
from sqlnames import unqualified

CONFIG = """
schema = "{schema}"
retention = "7d"

[types.mail]
max_attempts = 3

[types.tenant]
concurrency_key = "t:{{{{payload.t}}}}"
max_running_per_key = 2

[schedules.wake-mail]
every = "5m"
type = "mail"

[api]
schema = "jobkit_api"

[user_api]
schema = "jobkit_user"
types = ["mail"]
"""

SCHEMAS = ["jobkit", "app_jobs"]


def _settings(tmp_path: Path, schema: str) -> object:
    config = tmp_path / "jobkit.toml"
    config.write_text(CONFIG.format(schema=schema))
    return load_settings(config)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_query_names_its_functions_and_operators(schema: str) -> None:
    found = {name: names for name, sql in queries(schema).items() if (names := unqualified(sql))}
    assert found == {}


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_cron_command_names_its_functions_and_operators(tmp_path: Path, schema: str) -> None:
    settings = _settings(tmp_path, schema)
    site = CronSite("app", "postgres", (1, 4), f"jobkit:app.{schema}:")
    wanted = [w for w in scheduling.desired(settings, site) if w.target != "sql"]  # type: ignore[arg-type]
    assert {w.name for w in wanted} >= {"wake", "sweep-stuck", "sweep-dead", "prune", "prune-cron-history",
                                       "wake-mail"}
    found = {w.name: names for w in wanted if (names := unqualified(w.command))}
    assert found == {}


def test_deploy_scripts_pin_their_search_path_first(tmp_path: Path) -> None:
    """The DDL of the migrations, the Data API and the per-user API is jobkit's too, and is frozen
    (migrations are never edited): each deploy transaction's first statement pins search_path to
    pg_catalog for that transaction, so a default, constraint or policy cannot bind a planted object."""
    settings = _settings(tmp_path, "jobkit")
    scripts = {"bootstrap (before every migration)": render.render_bootstrap(settings),  # type: ignore[arg-type]
               "api": render.render_api(settings),  # type: ignore[arg-type]
               "user_api": render.render_user_api(settings)}  # type: ignore[arg-type]
    for label, script in scripts.items():
        assert script is not None, label
        first = pglast.parse_sql(script)[0].stmt
        assert pglast.stream.RawStream()(first) == \
            "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', TRUE)", label


@pytest.mark.parametrize(("sql", "expected"), [
    ("select a || b from s.t", ["operator ||"]),
    ("select a operator(public.||) b from s.t", ["operator public.||"]),
    ("select x from s.t where x in ('a', 'b')", ["in (=)"]),
    ("select x from s.t where x like 'a%%'", ["like (~~)"]),
    ("select x from s.t where x ilike 'a%%'", ["ilike (~~*)"]),
    ("select x from s.t where x between 1 and 2", ["between (BETWEEN)"]),
    ("select x from s.t where x is distinct from 1", ["distinct (=)"]),
    ("select nullif(x, 1) from s.t", ["nullif (=)"]),
    ("select x from s.t where x = any(%(xs)s)", ["operator ="]),
    ("select x from s.t where x in (select y from s.u)", ["subquery operator ="]),
    ("select case x when 1 then 2 end from s.t", ["case x when (=)"]),
    ("select 1 from s.t join s.u using (id)", ["join using (=)"]),
    ("select x from s.t order by x using <", ["order by using <"]),
    ("select left(x, 2) from s.t", ["function left()"]),
    ("select x::text from s.t", ["type text"]),
    ("select x collate \"C\" from s.t", ["collation C"]),
    ("select x from t", ["relation t"]),
    ("create index on s.t using gin (x jsonb_path_ops)", ["operator class jsonb_path_ops"]),
    # Nothing to report: qualified names, keyword types and syntax, CTEs.
    ("with v as (select 1 as n) select pg_catalog.count(*), x::int, coalesce(x, 1), "
     "extract(epoch from pg_catalog.now()), current_user from v, s.t "
     "where x operator(pg_catalog.=) any ('{1,2}') and s.f(x)::pg_catalog.text is not null", []),
])
def test_the_check_reports_every_kind_of_lookup(sql: str, expected: list[str]) -> None:
    assert unqualified(sql) == expected


def test_the_check_reports_the_doctor_fairness_query_as_it_was() -> None:
    """Issue 21, item 3: doctor concatenated text and integers with a bare ||, and a planted
    public.||(text, integer) ran as the owner."""
    before = ("select (select pg_catalog.array_agg(t.type || coalesce(' ' || t.max_running_per_key "
              "|| '/key', '') order by t.type) from jobkit.job_types t where t.fair) as fair")
    assert unqualified(before).count("operator ||") == 3
