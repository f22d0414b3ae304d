"""Search-path hijack (issue 10, item 6; issue 21, item 3): a role that may create objects in `public`
plants functions, aggregates and operators shadowing the built-ins jobkit's SQL uses, each of which
records that it ran; then every code path runs as the owner and none of the planted objects may run.

Two search paths. With the default one, PostgreSQL searches pg_catalog first, but only an identical
signature hides a planted overload: one whose argument types fit the call *better* wins (left(name,
int) for a `name` column, array_agg(jsonb) against the polymorphic array_agg(anynonarray), ||(text,
integer) for `' ' || n`, which made `jobkit doctor` run mallory's code as the owner). With `public`
ahead of pg_catalog, mallory also plants a copy of every pg_catalog operator and function of the
names jobkit's SQL uses (found by parsing it), with the very same signature: any name left to the
search_path would then run mallory's copy. The plants go into jobkit's database and into pg_cron's
(`postgres`), where the schedule queries and the cron-history cleanup run. Every statement jobkit's
code sent meanwhile is also parsed: none may leave a name to the search_path (tests/sqlnames.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, TypeVar

import jobkit
import pglast
import psycopg
import pytest
from click.testing import CliRunner, Result
from jobkit.cli import cli
from jobkit.config import Settings, load_settings
from jobkit.connector import Database, Session
from jobkit.cron import schedules as scheduling
from jobkit.cron.pg_cron import CronJobs, CronSite
from jobkit.handlers import RateLimited, Registry
from jobkit.jobs import Failure, NewJob, StepRecord, WaitSpec, WorkerInfo
from jobkit.lifecycle import Lifecycle
from jobkit.ops import doctor
from jobkit.ops.localdb import LocalCluster
from jobkit.queries import queries
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.schema.reference import render_reference
from jobkit.schema.render import ident, render_bootstrap, render_function_file
from jobkit.schema.trigger_script import render_apply
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.drain import Drainer
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.signing import signed_headers
from opened import with_backend
from pglast.stream import RawStream
from poll import wait_for
from sqlnames import unqualified, used_builtins
from starlette.testclient import TestClient

T = TypeVar("T")
MALLORY = "mallory"
READER = "jobkit_sp_reader"  # a non-superuser owner's view (Supabase's postgres is no superuser)
SCHEMA = "jobkit"

CONFIG = """
schema = "jobkit"
retention = "7d"

[types.mail]
max_attempts = 3

[types.tenant]
concurrency_key = "t:{{payload.t}}"
max_running_per_key = 2
max_running = 10

[types.metered]
rate_limit = "mailer"
{extra}
[ratelimits.mailer]
rate = "1000/s"
burst = 5

[ratelimits.api]
rate = "50/s"
burst = 1

[events."order.paid"]
types = ["manual"]
retention = "30d"

[wake]
batch_size = 50

[schedules.wake-mail]
every = "5m"
type = "mail"

[schedules.nightly]
cron = "0 3 * * *"
sql = "select 1"

[api]
schema = "jobkit_api"

[user_api]
schema = "jobkit_user"
types = ["mail"]
"""

# For every built-in function jobkit's SQL calls: an overload that would win against pg_catalog's if
# the call named it unqualified with the argument types it passes (signature, return type, the real
# result). Where those types are exactly pg_catalog's (count(*), now(), split_part(text, text, int)),
# no overload can win while pg_catalog is searched first; the same signature is planted anyway, to
# show the name was considered.
FUNCTIONS: list[tuple[str, str, str]] = [
    ("left(name, integer)", "text", "pg_catalog.left($1::pg_catalog.text, $2)"),
    ("left(text, integer)", "text", "pg_catalog.left($1, $2)"),
    ("length(name)", "integer", "pg_catalog.length($1::pg_catalog.text)"),
    ("length(text)", "integer", "pg_catalog.length($1)"),
    ("split_part(text, text, integer)", "text", "pg_catalog.split_part($1, $2, $3)"),
    ("has_database_privilege(name, text)", "boolean",
     "pg_catalog.has_database_privilege($1::pg_catalog.text, $2)"),
    ("has_database_privilege(text, text)", "boolean", "pg_catalog.has_database_privilege($1, $2)"),
    ("has_schema_privilege(oid, text, text)", "boolean", "pg_catalog.has_schema_privilege($1, $2, $3)"),
    ("has_schema_privilege(oid, name, text)", "boolean",
     "pg_catalog.has_schema_privilege($1, $2::pg_catalog.text, $3)"),
    ("has_table_privilege(oid, oid, text)", "boolean", "pg_catalog.has_table_privilege($1, $2, $3)"),
    ("has_function_privilege(oid, oid, text)", "boolean",
     "pg_catalog.has_function_privilege($1, $2, $3)"),
    ("pg_has_role(name, text, text)", "boolean", "pg_catalog.pg_has_role($1, $2::pg_catalog.name, $3)"),
    ("pg_has_role(name, name, text)", "boolean", "pg_catalog.pg_has_role($1, $2, $3)"),
    ("current_database()", "name", "pg_catalog.current_database()"),
    ("current_setting(text)", "text", "pg_catalog.current_setting($1)"),
    ("current_setting(text, boolean)", "text", "pg_catalog.current_setting($1, $2)"),
    ("set_config(text, text, boolean)", "text", "pg_catalog.set_config($1, $2, $3)"),
    ("now()", "timestamp with time zone", "pg_catalog.now()"),
    ("to_regclass(text)", "regclass", "pg_catalog.to_regclass($1)"),
    ("to_regprocedure(text)", "regprocedure", "pg_catalog.to_regprocedure($1)"),
    ("hashtextextended(text, integer)", "bigint", "pg_catalog.hashtextextended($1, $2)"),
    ("hashtextextended(text, bigint)", "bigint", "pg_catalog.hashtextextended($1, $2)"),
    ("pg_try_advisory_lock(bigint)", "boolean", "pg_catalog.pg_try_advisory_lock($1)"),
    ("pg_advisory_unlock(bigint)", "boolean", "pg_catalog.pg_advisory_unlock($1)"),
    ("pg_total_relation_size(oid)", "bigint", "pg_catalog.pg_total_relation_size($1::pg_catalog.regclass)"),
    ("pg_total_relation_size(regclass)", "bigint", "pg_catalog.pg_total_relation_size($1)"),
    ("jsonb_build_object(text, timestamp with time zone)", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    ("extract(text, interval)", "numeric", "pg_catalog.extract($1, $2)"),
    ("extract(text, timestamp with time zone)", "numeric", "pg_catalog.extract($1, $2)"),
    ("format(text, text, text)", "text", "pg_catalog.format($1, $2, $3)"),
    ("format(text, text)", "text", "pg_catalog.format($1, $2)"),
]

# Set-returning functions: (signature, element type, the real rows).
SET_FUNCTIONS: list[tuple[str, str, str]] = [
    ("jsonb_array_elements(jsonb)", "jsonb", "select * from pg_catalog.jsonb_array_elements($1)"),
    ("unnest(timestamp with time zone[])", "timestamp with time zone", "select * from pg_catalog.unnest($1)"),
    ("unnest(interval[])", "interval", "select * from pg_catalog.unnest($1)"),
    ("unnest(text[])", "text", "select * from pg_catalog.unnest($1)"),
]

# Aggregates: (signature, state type, transition function, initial state or None). The final
# function records the call; it runs even over no rows.
AGGREGATES: list[tuple[str, str, str, str | None]] = [
    ("array_agg(jsonb)", "jsonb[]", "pg_catalog.array_append", None),
    ("array_agg(timestamp with time zone)", "timestamp with time zone[]", "pg_catalog.array_append", None),
    ("count(*)", "bigint", "pg_catalog.int8inc", "0"),
    ("min(timestamp with time zone)", "timestamp with time zone", "pg_catalog.timestamptz_smaller", None),
    ("max(text)", "text", "pg_catalog.text_larger", None),
]

# Operators: every (left, right) pair of these types for which pg_catalog has no operator of exactly
# those types but resolves one by implicit casts; the planted one is then the exact match. Pairs of
# one type also stand for `column OP 'literal'` (an unknown literal is taken as the other side's type).
OPERATORS = ["=", "<>", "<", "<=", ">", ">=", "+", "-", "||", "~~", "~~*", "!~~", "#>>", "->>", "->"]
OPERAND_TYPES = ["text", "name", '"char"', "character varying", "smallint", "integer", "bigint",
                 "numeric", "double precision", "boolean", "uuid", "jsonb", "timestamp with time zone",
                 "interval", "oid", "regclass", "regrole", "text[]", "uuid[]", "integer[]"]

PLANT_OPERATORS = """
do $plant$
declare
    v_op text; v_left text; v_right text; v_returns text; v_result text; v_n int := 0;
begin
    foreach v_op in array %(ops)s loop
        foreach v_left in array %(types)s loop
            foreach v_right in array %(types)s loop
                continue when exists (
                    select from pg_catalog.pg_operator o
                    where o.oprname = v_op and o.oprnamespace = 'pg_catalog'::pg_catalog.regnamespace
                      and o.oprleft = v_left::pg_catalog.regtype and o.oprright = v_right::pg_catalog.regtype);
                v_result := pg_catalog.format('a operator(pg_catalog.%%s) b', v_op);
                begin
                    execute pg_catalog.format('select pg_catalog.format_type(pg_catalog.pg_typeof('
                        'null::%%s operator(pg_catalog.%%s) null::%%s), null)', v_left, v_op, v_right)
                        into v_returns;
                exception when others then
                    continue when v_left <> v_right;  -- pg_catalog cannot apply v_op to these types
                    begin  -- `x OP 'literal'`: the literal (unknown) is taken as x's type
                        execute pg_catalog.format('select pg_catalog.format_type(pg_catalog.pg_typeof('
                            'null::%%s operator(pg_catalog.%%s) null), null)', v_left, v_op) into v_returns;
                        v_result := 'null';
                    exception when others then
                        continue;
                    end;
                end;
                v_n := v_n + 1;
                execute pg_catalog.format(
                    'create function public.planted_op_%%s(a %%s, b %%s) returns %%s language plpgsql as $f$ '
                    'begin insert into public.planted_calls values (%%L); return %%s; end $f$',
                    v_n, v_left, v_right, v_returns,
                    pg_catalog.format('operator %%s(%%s, %%s)', v_op, v_left, v_right), v_result);
                execute pg_catalog.format(
                    'create operator public.%%s (function = public.planted_op_%%s, leftarg = %%s, rightarg = %%s)',
                    v_op, v_n, v_left, v_right);
            end loop;
        end loop;
    end loop;
end
$plant$
"""


@dataclass
class Calls:
    """The planted objects that ran, per step, and the pinned sessions that read them."""

    steps: dict[str, list[str]] = field(default_factory=dict)
    sessions: list[Session] = field(default_factory=list)  # jobkit's database, then pg_cron's

    @property
    def app(self) -> Session:
        return self.sessions[0]

    @property
    def cron(self) -> Session:
        return self.sessions[1]

    def collect(self, step: str) -> None:
        names: list[str] = []
        for session in self.sessions:
            rows = session.all("delete from public.planted_calls returning name")
            names += [str(r["name"]) for r in rows]
        if names:
            self.steps[step] = sorted(set(names))


def _array(values: list[str]) -> str:
    return "array[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def _plant_sql() -> str:
    lines = ["create table public.planted_calls (name text);",
             "grant insert, select, delete on public.planted_calls to public;"]
    for signature, returns, result in FUNCTIONS:
        lines.append(
            f"create function public.{signature} returns {returns} language plpgsql as $f$ "
            f"begin insert into public.planted_calls values ('{signature}'); return {result}; end $f$;")
    for signature, element, rows in SET_FUNCTIONS:
        lines.append(
            f"create function public.{signature} returns setof {element} language plpgsql as $f$ "
            f"begin insert into public.planted_calls values ('{signature}'); return query {rows}; end $f$;")
    for n, (signature, state, step, initial) in enumerate(AGGREGATES):
        lines.append(
            f"create function public.planted_final_{n}(s {state}) returns {state} language plpgsql as $f$ "
            f"begin insert into public.planted_calls values ('{signature}'); return s; end $f$;")
        init = f", initcond = '{initial}'" if initial is not None else ""
        lines.append(f"create aggregate public.{signature} (sfunc = {step}, stype = {state}, "
                     f"finalfunc = public.planted_final_{n}{init});")
    lines.append(PLANT_OPERATORS % {"ops": _array(OPERATORS), "types": _array(OPERAND_TYPES)})
    return "\n".join(lines)


def _drop_roles(admin: Session) -> None:
    for role in (MALLORY, READER):
        if admin.scalar("select pg_catalog.count(*) from pg_catalog.pg_roles where rolname = %s", (role,)):
            admin.execute_with_identifiers("drop owned by {r}", r=role)
            admin.execute_with_identifiers("drop role {r}", r=role)


#: The search paths the plants are tried under: the default (pg_catalog searched first), and public
#: ahead of pg_catalog (True).
ORDERS = {"pg_catalog first": False, "public first": True}

# For the public-first order: a copy, in public, of every pg_catalog operator and plain function of
# the given names (those jobkit's SQL uses), same signature, recording its call. Operators and
# functions whose types plpgsql cannot take (internal, variadic "any") are left out.
COPY_BUILTINS = """
do $copy$
declare
    o record; f record; v_n int := 0; v_types text[]; v_args text; v_call text;
begin
    for o in select p.oprname, p.oprleft, p.oprright, p.oprresult from pg_catalog.pg_operator p
             where p.oprnamespace operator(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
               and p.oprname operator(pg_catalog.=) any (%(ops)s::pg_catalog.name[]) loop
        v_n := v_n operator(pg_catalog.+) 1;
        begin
            execute pg_catalog.format(
                'create function public.copied_%%s(%%s b %%s) returns %%s language plpgsql as $f$ '
                'begin insert into public.planted_calls values (%%L); return %%s operator(pg_catalog.%%s) b; end $f$',
                v_n, case when o.oprleft operator(pg_catalog.<>) 0
                          then pg_catalog.format('a %%s,', pg_catalog.format_type(o.oprleft, null)) else '' end,
                pg_catalog.format_type(o.oprright, null), pg_catalog.format_type(o.oprresult, null),
                pg_catalog.format('operator %%s(%%s, %%s) (copy)', o.oprname,
                                  pg_catalog.format_type(o.oprleft, null), pg_catalog.format_type(o.oprright, null)),
                case when o.oprleft operator(pg_catalog.<>) 0 then 'a' else '' end, o.oprname);
            execute pg_catalog.format(
                'create operator public.%%s (function = public.copied_%%s, %%s rightarg = %%s)', o.oprname, v_n,
                case when o.oprleft operator(pg_catalog.<>) 0
                     then pg_catalog.format('leftarg = %%s,', pg_catalog.format_type(o.oprleft, null)) else '' end,
                pg_catalog.format_type(o.oprright, null));
            insert into public.copied values ('operator');
        exception when others then
            null;
        end;
    end loop;
    for f in select p.oid, p.proname, p.proargtypes, p.prorettype, p.proretset from pg_catalog.pg_proc p
             where p.pronamespace operator(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
               and p.proname operator(pg_catalog.=) any (%(functions)s::pg_catalog.name[])
               and p.prokind operator(pg_catalog.=) 'f' and p.provariadic operator(pg_catalog.=) 0 loop
        v_n := v_n operator(pg_catalog.+) 1;
        v_types := array(select pg_catalog.format_type(t, null) from pg_catalog.unnest(f.proargtypes::pg_catalog.oid[]) t);
        v_args := pg_catalog.array_to_string(array(
            select pg_catalog.format('a%%s %%s', i, v_types[i])
            from pg_catalog.generate_subscripts(v_types, 1) i), ', ');
        v_call := pg_catalog.format('pg_catalog.%%I(%%s)', f.proname, pg_catalog.array_to_string(array(
            select 'a' operator(pg_catalog.||) i from pg_catalog.generate_subscripts(v_types, 1) i), ', '));
        begin
            execute pg_catalog.format(
                'create function public.%%I(%%s) returns %%s%%s language plpgsql as $f$ '
                'begin insert into public.planted_calls values (%%L); %%s; end $f$',
                f.proname, v_args, case when f.proretset then 'setof ' else '' end,
                pg_catalog.format_type(f.prorettype, null),
                pg_catalog.format('%%s(%%s) (copy)', f.proname, pg_catalog.array_to_string(v_types, ', ')),
                case when f.proretset then 'return query select * from ' operator(pg_catalog.||) v_call
                     else 'return ' operator(pg_catalog.||) v_call end);
            insert into public.copied values ('function');
        exception when others then
            null;
        end;
    end loop;
end
$copy$
"""


def _jobkit_sql() -> list[str]:
    """Every query and cron command of jobkit's (what the copies are derived from)."""
    with TemporaryDirectory() as folder:
        config = Path(folder) / "jobkit.toml"
        config.write_text(CONFIG.format(extra=""))
        settings = load_settings(config)
    site = CronSite("app", "postgres", (1, 4), f"jobkit:app.{SCHEMA}:")
    commands = [w.command for w in scheduling.desired(settings, site) if w.target != "sql"]
    return [*queries(SCHEMA).values(), *commands]


def _copy_builtins(session: Session) -> int:
    """Plant the copies (as mallory, on ``session``); how many were made."""
    operators, functions = used_builtins(_jobkit_sql())
    session.execute("create table public.copied (kind text)")
    session.script(COPY_BUILTINS % {"ops": _array(sorted(operators)), "functions": _array(sorted(functions))})
    return int(session.scalar("select pg_catalog.count(*) from public.copied"))


@pytest.fixture(params=list(ORDERS))
def planted(request: pytest.FixtureRequest, cluster: LocalCluster, admin: Session, db_url: str) -> Iterator[Calls]:
    """mallory's plants in jobkit's database and in pg_cron's, under each search path of ORDERS;
    yields the record of their calls (read through superuser sessions pinned to pg_catalog, immune
    to the plants)."""
    public_first = ORDERS[request.param]
    _drop_roles(admin)  # left over by an interrupted run
    admin.execute_with_identifiers("create role {r} nologin", r=MALLORY)
    admin.execute_with_identifiers("create role {r} login in role pg_read_all_settings", r=READER)
    calls = Calls()
    urls = (db_url, cluster.url("postgres"))
    try:
        with ExitStack() as stack:
            for url in urls:
                session = stack.enter_context(Database(url).session())
                session.execute("set search_path = pg_catalog, pg_temp")
                calls.sessions.append(session)
                session.execute_with_identifiers("grant create on schema public to {r}", r=MALLORY)
                session.execute_with_identifiers("set role {r}", r=MALLORY)
                session.script(_plant_sql())
                if public_first:
                    assert _copy_builtins(session) > 300
                session.execute("reset role")
                if public_first:
                    session.execute_with_identifiers("alter database {db} set search_path = public, pg_catalog",
                                                     db=Database(url).dbname)
            if public_first:
                _copies_shadow(db_url, calls)
            try:
                yield calls
            finally:
                for url, session in zip(urls, calls.sessions, strict=True):
                    session.execute("reset role")
                    session.execute_with_identifiers("alter database {db} reset search_path",
                                                     db=Database(url).dbname)
                    session.execute_with_identifiers("drop owned by {r}", r=MALLORY)
    finally:
        _drop_roles(admin)


def _copies_shadow(db_url: str, calls: Calls) -> None:
    """The copies win over pg_catalog's originals for a name left to the search_path: the test can
    fail."""
    with Database(db_url).session() as session:
        assert session.scalar("show search_path") == "public, pg_catalog"
        session.execute("select pg_catalog.now() > pg_catalog.now(), md5('x')")
    calls.collect("shadow check")
    assert calls.steps.pop("shadow check") == [
        "md5(text) (copy)", "operator >(timestamp with time zone, timestamp with time zone) (copy)"]


@dataclass
class Executed:
    """The text of every statement jobkit's connector ran (``seen``); of those, the ones jobkit's
    own code sent (not this test's), single statements and scripts apart."""

    seen: set[str] = field(default_factory=set)
    statements: set[str] = field(default_factory=set)
    scripts: set[str] = field(default_factory=set)


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> Executed:
    import jobkit.connector as connector
    import jobkit.connector.aio as aio

    package = str(Path(jobkit.__file__).parent)
    seam = str(Path(connector.__file__).parent)
    found = Executed()

    def record(sql: str) -> str:
        found.seen.add(sql)
        frame, script = sys._getframe(1), False
        while frame is not None and frame.f_code.co_filename.startswith(seam):  # up to the caller
            script |= frame.f_code.co_name == "script"
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename.startswith(package):
            (found.scripts if script else found.statements).add(sql)
        return sql

    monkeypatch.setattr(connector, "_q", record)
    monkeypatch.setattr(aio, "_q", record)
    return found


def _cli(config: Path, *args: str, input: str | None = None) -> Result:
    result = CliRunner().invoke(cli, ["-c", str(config), *args], input=input)
    assert result.exit_code == 0, f"jobkit {' '.join(args)}: {result.output}"
    return result


def _async(db_url: str, body: Callable[[PostgresBackend], Awaitable[T]]) -> T:
    return with_backend(PostgresBackend(db_url), body)


def _registry() -> Registry:
    jobs = Registry()

    @jobs.handler("mail", lease=5)
    async def mail(payload: Any, ctx: Any) -> Any:
        assert await ctx.heartbeat()  # extend_leases
        await ctx.acquire("api", 2)  # take_tokens, then token_wait (burst 1)
        return {"sent": payload}  # complete_jobs with a result

    @jobs.handler("metered", rate_limit="mailer")
    async def metered(payload: Any, ctx: Any) -> Any:
        return payload

    @jobs.handler("boom", max_attempts=2)
    async def boom(payload: Any, ctx: Any) -> None:
        raise ValueError("no")  # fail_jobs

    @jobs.handler("limited")
    async def limited(payload: Any, ctx: Any) -> None:
        raise RateLimited("429", retry_after=60)  # snooze_job

    @jobs.handler("slow", timeout=30)
    async def slow(payload: Any, ctx: Any) -> None:
        await asyncio.sleep(0.3)

    return jobs


# ---- the code paths -------------------------------------------------------------------------------

def _deploy(config: Path, db_url: str) -> None:
    config.write_text(CONFIG.format(extra="\n[types.old]\nmax_attempts = 2\n\n[dashboard]\npayload_index = true\ncreated_index = true\n"))
    _cli(config, "deploy", "--db-url", db_url)
    config.write_text(CONFIG.format(extra=""))
    _cli(config, "deploy", "--db-url", db_url)  # drops type old, keeps the rest
    _cli(config, "deploy", "--check", "--db-url", db_url)


# Declared row triggers (issue 24) on an app table outside public.
SHOP = "create schema if not exists shop; create table if not exists shop.orders (id bigint primary key, status text, email text)"
TRIGGERS = """
[triggers.placed]
table = "shop.orders"
on = ["insert"]
type = "mail"
payload = ["id", "email"]
idempotency = "pk"

[triggers.receipt]
table = "shop.orders"
on = ["update"]
when = "{when}"
type = "mail"
payload = "row"

[triggers.gone]
table = "shop.orders"
on = ["delete"]
when = "old.status = 'paid'"
type = "mail"
payload = "pk"
[triggers.shipped]
table = "shop.orders"
on = ["update", "delete"]
emit = "order.shipped"
key = "email"
payload = "pk"

[triggers.placed_event]
table = "shop.orders"
on = ["insert"]
emit = "order.placed"
payload = "row"
"""


def _row_triggers(config: Path, db_url: str) -> None:
    """Deploy row triggers, fire them (their functions run as the owner), list, change, remove."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SHOP)
    paid = "new.status = 'paid' and old.status is distinct from 'paid'"
    config.write_text(CONFIG.format(extra=TRIGGERS.format(when=paid)))
    _cli(config, "deploy", "--db-url", db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("insert into shop.orders (id, status, email) select g, 'new', 'x' from pg_catalog.generate_series(1, 3) g")
        conn.execute("update shop.orders set status = 'paid'")
        conn.execute("delete from shop.orders where id operator(pg_catalog.=) 1")
    assert '"jobs_last_hour": 3' in _cli(config, "triggers", "list", "--json", "--db-url", db_url).output
    assert '"events_last_hour": 4' in _cli(config, "triggers", "list", "--json", "--db-url", db_url).output
    config.write_text(CONFIG.format(extra=TRIGGERS.format(when="pg_catalog.upper(new.status) = 'PAID'")))
    _cli(config, "deploy", "--db-url", db_url)
    _cli(config, "deploy", "--check", "--db-url", db_url)
    config.write_text(CONFIG.format(extra=""))
    _cli(config, "deploy", "--db-url", db_url)  # removes them
    # the same through `jobkit render`'s script (sql/row_triggers_apply.sql), then removed by it
    config.write_text(CONFIG.format(extra=TRIGGERS.format(when=paid)))
    with psycopg.connect(db_url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(render_apply(load_settings(config, env={})))
        conn.execute("insert into shop.orders (id, status, email) values (10, 'new', 'y')")
    config.write_text(CONFIG.format(extra=""))
    with psycopg.connect(db_url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(render_apply(load_settings(config, env={})))  # its removal moves the staged rows
        row = conn.execute("select pg_catalog.count(*) from jobkit.jobs where source is not null").fetchone()
        assert conn.execute("select pg_catalog.count(*) from jobkit.row_triggers").fetchone() == (0,)
    assert row is not None and row[0] == 8


def _locked_deploy(config: Path, db_url: str) -> None:
    """A deploy that queues for the deploy lock (held here) until --lock-wait runs out."""
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("select pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended(%s, 0))",
                       (f"jobkit:deploy:{SCHEMA}",))
        result = CliRunner().invoke(cli, ["-c", str(config), "deploy", "--db-url", db_url, "--lock-wait", "1s"])
    assert result.exit_code != 0 and "held the deploy lock" in result.output, result.output


def _enqueue(db_url: str, config: Path) -> None:
    jobkit.enqueue(db_url, "mail", {"to": "a"})
    jobkit.enqueue(db_url, "mail", {"to": "b"}, delay=timedelta(0), idempotency_key="k")
    with psycopg.connect(db_url) as conn:  # the caller's own connection and search_path
        jobkit.enqueue(conn, "mail", {"to": "c"}, run_at=datetime.now(UTC))
        jobkit.enqueue_many(conn, [NewJob("metered", {"n": 1}, delay=timedelta(0)),
                                   NewJob("metered", {"n": 2}, run_at=datetime.now(UTC))])
    jobkit.enqueue_many(db_url, [NewJob(t, {"n": n}, delay=timedelta(0)) for n, t in enumerate(
        ["metered", "boom", "limited", "slow", "slow", "slow", "slow"])])
    _cli(config, "enqueue", "mail", "--payload", '{"to": "d"}', "--delay", "1s", "--db-url", db_url)


def _drain(db_url: str) -> None:
    async def body(backend: PostgresBackend) -> None:
        jobs = _registry()
        for job_type in ("mail", "metered", "boom", "limited"):
            await Drainer(jobs, backend).drain(job_type)
        drainer = Drainer(jobs, backend, concurrency=1, prefetch=3)
        task = asyncio.create_task(drainer.drain("slow"))
        deadline = asyncio.get_running_loop().time() + 10
        # Until the window (3) is full: 3 of the 4 slow jobs claimed, one running, two waiting. (Not
        # `held`, which counts a claim still in flight: a shutdown then had nothing to release.)
        while await backend.due_count("slow") > 1:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        assert await drainer.shutdown(timedelta(seconds=5)) > 0  # release_jobs
        await task
        assert await backend.due_types() and await backend.due_count("slow")
        await backend.next_due("slow")
        await backend.worker_keys()
        await backend.ping()

    _async(db_url, body)


def _manager(session: Session) -> None:
    manager = Lifecycle(session, SCHEMA)
    ids = manager.enqueue_many([NewJob("manual", {"i": i}, max_attempts=1) for i in range(5)])
    jobs = manager.claim("manual", 5, "w", timedelta(minutes=1))
    assert manager.extend([(jobs[0].id, jobs[0].attempts)], timedelta(minutes=2))
    manager.complete([(jobs[0].id, jobs[0].attempts, '{"r": 1}')])
    manager.fail([Failure(jobs[1].id, jobs[1].attempts, "x", permanent=True)])
    manager.snooze(jobs[2].id, jobs[2].attempts, timedelta(minutes=1))
    manager.cancel(jobs[3].id)
    manager.retry(jobs[3].id)
    manager.sweep_stuck()
    manager.sweep_dead()
    manager.prune(timedelta(days=7))
    assert manager.progress([(jobs[4].id, jobs[4].attempts, {"fraction": 0.5})]) == {jobs[4].id}
    assert manager.get(ids[0]) and manager.history(ids[1]) is not None
    assert manager.state(ids[4]) and jobkit.wait(session, ids[0], timeout=1).result == {"r": 1}
    manager.wait_on([ids[4]], timedelta(minutes=1))
    # Fair claims (keys rendered from the payload), a key paused, debounce and throttle.
    manager.enqueue_many([NewJob("tenant", {"t": i % 3}) for i in range(9)])
    session.execute(f"select {ident(SCHEMA)}.pause_type('tenant', 't:2')")
    fair = manager.claim("tenant", 9, "w", timedelta(minutes=1))
    assert len(fair) == 4 and len(manager.claim("tenant", 9, "w", timedelta(minutes=1))) == 0
    session.execute(f"select {ident(SCHEMA)}.resume_type('tenant', 't:2')")
    assert len(manager.claim("tenant", 9, "w", timedelta(minutes=1))) == 2
    manager.enqueue(NewJob("tenant", {"t": 5}, debounce=timedelta(seconds=30)))
    manager.enqueue(NewJob("tenant", {"t": 5}, debounce=timedelta(seconds=30)))
    manager.enqueue(NewJob("tenant", {"t": 6}, throttle=timedelta(minutes=1)))
    manager.enqueue(NewJob("tenant", {"t": 6}, throttle=timedelta(minutes=1)))
    assert manager.session.run(manager.sql.running_check([(fair[0].id, fair[0].attempts)])) == {}
    # Durable steps: a record fenced by its attempt (held, locked), then read back.
    step = StepRecord(fair[0].id, fair[0].attempts, "charge", 1, '{"ok": 1}', None, 1, datetime.now(UTC))
    held = manager.session.run(manager.sql.save_steps([step], hold=True))
    assert held == {(fair[0].id, fair[0].attempts)}
    direct = manager.sql.save_steps_direct([step._replace(occurrence=2)])  # the worker's own statement
    assert direct is not None and manager.session.run(direct) == held
    assert manager.session.run(manager.sql.load_steps([fair[0].id])) == {
        (fair[0].id, "charge", 1): {"ok": 1}, (fair[0].id, "charge", 2): {"ok": 1}}
    # Sleeps, waits and events (47_waits.sql): each kind of wait, and each way one is resolved.
    session.execute(f"insert into {ident(SCHEMA)}.event_config (name, types) values ('paid', '{{manual}}')")
    manager.enqueue_many([NewJob("waits", {}) for _ in range(4)])
    ws = manager.claim("waits", 4, "w", timedelta(minutes=1))
    paid = WaitSpec("paid", 1, "event", delay=timedelta(hours=1), events=("paid",), keys=("1",))
    assert manager.suspend(ws[0].id, ws[0].attempts, paid) == "waiting"
    assert manager.emit("paid", "1", {"x": 1}, "evt") > 0  # resolves it; enqueues the subscriber
    assert manager.suspend(ws[1].id, ws[1].attempts, paid) == "pending"  # latch
    nap = WaitSpec("nap", 1, "sleep", delay=timedelta(hours=1))
    assert manager.suspend(ws[2].id, ws[2].attempts, nap) == "waiting"
    session.execute(f"update {ident(SCHEMA)}.job_waits set due = pg_catalog.now() operator(pg_catalog.-) interval '1 second'")
    children = WaitSpec("kids", 1, "jobs", job_ids=(jobs[4].id,))
    assert manager.suspend(ws[3].id, ws[3].attempts, children) == "waiting"
    assert len(manager.claim("waits", 4, "w", timedelta(minutes=1))) == 3  # the nap ended: claimed
    manager.complete([(jobs[4].id, jobs[4].attempts, None)])  # the child finished: its parent resumes
    assert manager.sweep_waits() == 0
    _flows(manager)
    # Worker presence (0021): the worker "w" that claimed above beats, so status lists its jobs.
    _present(manager)


def _flows(manager: Lifecycle) -> None:
    """Job graphs (48_flows.sql): create, release on completion, a failure and a cancel carried
    down, pause/resume, the blocked sweep, cancel_flow and prune of the edges and flows. (The
    statements the test itself sends qualify every name too: the harness checks them all.)"""
    session, s = manager.session, ident(SCHEMA)
    eq = "operator(pg_catalog.=)"
    graph = jobkit.Flow("sp")
    root = graph.add("flowjob", {"n": 0})
    kid = graph.add("flowjob", {"n": 1}, after=[root])
    graph.add("flowjob", {"n": 2}, after=[(kid, "run")])
    graph.add("flowjob", {"n": 3}, after=[root], on_parent_failure="cancel")
    run = jobkit.flow(session, graph, schema=SCHEMA)
    [claimed] = manager.claim("flowjob", 5, "w", timedelta(minutes=1))
    manager.complete([(claimed.id, claimed.attempts, '{"r": 0}')])  # _settle_children releases two
    assert manager.parents(run[kid])[0].result == {"r": 0}
    assert session.scalar(f"select {s}.pause_flow(%s)", (run.id,)) == 2
    assert session.scalar(f"select {s}.resume_flow(%s)", (run.id,)) == 2
    jobs = manager.claim("flowjob", 5, "w", timedelta(minutes=1))
    manager.fail([Failure(j.id, j.attempts, "x", permanent=True) for j in jobs])  # a failure carried down
    assert [j.id for j in manager.flow_state(run.id)] == run.job_ids  # what jobkit.wait on a flow reads
    other = jobkit.gather(session, [NewJob("flowjob", {})], NewJob("flowjob", {}), schema=SCHEMA)
    manager.cancel(other.job_ids[0])
    session.execute(f"update {s}.jobs set status = 'completed' where id {eq} %s", (other.job_ids[1],))
    third = jobkit.gather(session, [NewJob("flowjob", {})], NewJob("flowjob", {}), schema=SCHEMA)
    session.execute(f"select {s}.delete_jobs(%s)", ([third.job_ids[0]],))
    manager.sweep_stuck()  # _sweep_blocked
    assert session.scalar(f"select {s}.cancel_flow(%s)", (third.id,)) >= 0
    session.execute(f"update {s}.jobs set status = 'cancelled', "
                    "completed_at = pg_catalog.now() operator(pg_catalog.-) interval '30 days' "
                    f"where type {eq} 'flowjob'")
    session.execute(f"update {s}.flows set created_at = pg_catalog.now() operator(pg_catalog.-) interval '30 days'")
    manager.prune(timedelta(days=7))  # the flows' edges, then the flows themselves
    assert session.scalar(f"select pg_catalog.count(*) from {s}.flows") == 0


def _flow_cli(config: Path, db_url: str, pinned: Session) -> None:
    """`jobkit flows show|pause|resume|cancel` and `jobkit jobs replay` (audited)."""
    base = ["--db-url", db_url]
    graph = jobkit.Flow("cli")
    first = graph.add("flowcli", {})
    graph.add("flowcli", {}, after=[first])
    run = jobkit.flow(pinned, graph, schema=SCHEMA)
    pinned.execute(f"insert into {ident(SCHEMA)}.job_steps (job_id, name, occurrence, attempt, status, started_at) "
                   "values (%s, 'a', 1, 1, 'completed', pg_catalog.now())", (run[first],))
    _cli(config, "flows", "show", str(run.job_ids[1]), *base)
    _cli(config, "flows", "pause", str(run.id), *base)
    _cli(config, "flows", "resume", str(run.id), *base)
    _cli(config, "jobs", "replay", str(run[first]), "--from-step", "a", *base)
    _cli(config, "flows", "cancel", str(run.id), *base)


def _present(manager: Lifecycle) -> None:
    info = WorkerInfo("w", "host", 1, "0", "notify", 4, ("manual",), timedelta(seconds=5), datetime.now(UTC))
    manager.session.run(manager.sql.worker_beat(info, 1))


def _endpoint(db_url: str, listen: str | None, pinned: Session) -> None:
    secret = str(pinned.scalar(f"select {ident(SCHEMA)}.secret('worker_secret')"))
    options = EndpointOptions(listen=listen, metrics_token="t0k", metrics_ttl=0.0)
    endpoint = WorkerEndpoint(_registry(), PostgresBackend(db_url), options)
    jobkit.enqueue(db_url, "mail", {"to": "endpoint"})
    with TestClient(endpoint.app) as client:
        wait_for(lambda: client.get("/healthz").status_code == 200, 5,  # with --listen: once LISTEN is in place
                 "/healthz answering 200", every=0.02)
        raw = json.dumps({"type": "mail", "nonce": uuid.uuid4().hex}).encode()
        response = client.post("/run?wait=1", content=raw, headers=signed_headers(secret, raw))
        assert response.status_code == 200, response.text
        assert client.get("/metrics", headers={"Authorization": "Bearer t0k"}).status_code == 200


def _cli_paths(config: Path, db_url: str, pinned: Session) -> None:
    base = ["--db-url", db_url]
    _cli(config, "secrets", "set", "--url", "http://127.0.0.1:9/run", *base)
    _cli(config, "secrets", "set", "--rotate", *base)
    _cli(config, "secrets", "set", "--secret-stdin", *base, input="s" * 40 + "\n")
    _cli(config, "secrets", "show", *base)
    _cli(config, "status", *base)
    _cli(config, "status", "--json", *base)
    _cli(config, "jobs", "list", *base)
    listed = json.loads(_cli(config, "jobs", "list", "--json", "--type", "mail", "--status", "completed",
                             *base).output)
    _cli(config, "jobs", "show", str(listed[0]["id"]), *base)
    done = pinned.scalar(f"select id from {ident(SCHEMA)}.jobs where status in ('failed', 'dead') limit 1")
    _cli(config, "jobs", "retry", str(done), *base)
    pinned.execute(f"update {ident(SCHEMA)}.jobs set status = 'dead' where type = 'boom'")
    _cli(config, "jobs", "retry", "--dead", "--yes", *base)
    pending = pinned.scalar(f"select id from {ident(SCHEMA)}.jobs where status = 'pending' limit 1")
    _cli(config, "jobs", "cancel", str(pending), *base)
    pinned.execute(f"update {ident(SCHEMA)}.jobs set completed_at = now() - interval '30 days' "
                   "where status = 'completed'")
    _cli(config, "jobs", "purge", "--status", "completed", "--older-than", "7d", "--yes", *base)
    _cli(config, "ratelimit", "set", "extra", "--rate", "10/s", "--burst", "2", *base)
    _cli(config, "ratelimit", "list", *base)
    _cli(config, "ratelimit", "list", "--json", *base)
    _cli(config, "ratelimit", "remove", "extra", *base)
    _cli(config, "enqueue", "brand_new", "--new-type", *base)  # record_types
    _cli(config, "enqueue", "brand_new", *base)  # type_known
    refused = CliRunner().invoke(cli, ["-c", str(config), "enqueue", "brand_nwe", *base])  # known_types
    assert refused.exit_code == 1 and "did you mean brand_new?" in refused.output, refused.output
    _cli(config, "pause", "mail", *base)
    _cli(config, "pause", "mail", "--key", "k1", *base)
    _cli(config, "status", *base)
    _cli(config, "resume", "mail", "--key", "k1", *base)
    _cli(config, "resume", "mail", *base)
    _cli(config, "schedule", "add", "wake-boom", "--every", "10m", "--type", "boom", *base)
    _cli(config, "schedule", "add", "hourly", "--cron", "0 * * * *", "--sql", "select 2", *base)
    _cli(config, "schedule", "list", *base)
    listed = json.loads(_cli(config, "schedule", "list", "--json", *base).output)
    assert {r["name"]: r["target"] for r in listed}["wake-boom"] == "wake boom"
    _cli(config, "schedule", "pause", "hourly", *base)
    _cli(config, "schedule", "resume", "hourly", *base)
    _cli(config, "schedule", "remove", "hourly", *base)
    _cli(config, "schedule", "remove", "wake-boom", *base)
    _flow_cli(config, db_url, pinned)


def _doctor(config: Path, db_url: str, pinned: Session) -> None:
    runner = CliRunner()
    for args in (["doctor"], ["doctor", "--json"]):
        runner.invoke(cli, ["-c", str(config), *args, "--db-url", db_url])  # exit 3 is fine
    settings = load_settings(config, db_url=db_url)
    doctor.run(Database(db_url), settings, ping=True, ping_timeout=0.3)
    # The pg_net transport's checks (wake-up failures), and a non-superuser owner's view.
    pinned.execute(f"update {ident(SCHEMA)}.settings set value = '\"pg_net\"' where key = 'transport'")
    pinned.execute(f"insert into {ident(SCHEMA)}.wakeups (type, transport, outcome, error) "
                   "values ('mail', 'pg_net', 'failed', 'refused')")
    try:
        doctor.run(Database(db_url), settings)
    finally:
        pinned.execute(f"update {ident(SCHEMA)}.settings set value = '\"notify\"' where key = 'transport'")
    reader = re.sub(r"://[^@/]+@", f"://{READER}@", db_url)
    doctor.run(Database(reader), settings)


def _table_rows(config: Path, db_url: str) -> None:
    """doctor's table sizes with a table that exists here (doctor asks about cron.job_run_details
    and net._http_response, which this database has not: pg_cron lives in `postgres`): counted
    while never analyzed, estimated after; and the SQL reference read from the catalog."""
    settings = load_settings(config, db_url=db_url)
    original = doctor.SIZED_TABLES
    doctor.SIZED_TABLES = (f"{SCHEMA}.job_attempts",)  # type: ignore[misc]
    try:
        with Database(db_url).session() as session:
            session.execute(f"select pg_catalog.pg_stat_reset(); delete from {SCHEMA}.job_attempts")
            assert doctor.table_sizes(session, settings, Database(db_url))
            assert render_reference(session, settings).startswith("# jobkit's SQL API")
    finally:
        doctor.SIZED_TABLES = original  # type: ignore[misc]


def _cron_commands(config: Path, db_url: str, pinned_cron: Session) -> None:
    """Every built-in and declared cron command, run as pg_cron runs it: its text in a session on
    its database (the job owner's default search_path). The cron-history cleanup gets an old run to
    delete, so that its filter is evaluated."""
    settings = load_settings(config, db_url=db_url)
    db = Database(db_url)
    jobs = CronJobs(db, settings)
    assert jobs.site.cron_database == "postgres" != jobs.site.jobkit_database
    wake = next(j.jobid for j in jobs.list() if j.name == "wake")
    pinned_cron.execute("insert into cron.job_run_details (jobid, runid, database, username, command, status, "
                        "start_time, end_time) values (%s, 910001, 'x', 'postgres', 'c', 'succeeded', "
                        "now() - interval '30 days', now() - interval '30 days')", (wake,))
    wanted = scheduling.desired(settings, jobs.site)
    assert {w.name for w in wanted} >= {"wake", "sweep-stuck", "sweep-dead", "prune", "prune-cron-history",
                                       "wake-mail"}
    for want in wanted:
        with db.with_dbname(want.database).session() as session:
            session.script(want.command)
    assert pinned_cron.scalar("select count(*) from cron.job_run_details where runid = 910001") == 0


def _deploy_migration(db_url: str, config: Path, tmp_path: Path, pinned: Session) -> None:
    """A deploy that applies a migration (bootstrap, lock timeout, history row, the API schema) and
    its outside-transaction part (index, backfill), and --check over it; then forgotten."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0099_probe.sql").write_text(
        "create table {{ s }}.probe (id int);\nalter table {{ s }}.probe enable row level security;\n"
        "insert into {{ s }}.probe values (null);\n"
        "-- jobkit:outside-transaction\n"  # run in autocommit after the transaction (outside.py)
        "create index concurrently if not exists probe_idx on {{ s }}.probe (id);\n"
        "update {{ s }}.probe set id = 1 where ctid operator(pg_catalog.=) any (array(\n"
        "    select ctid from {{ s }}.probe where id is null limit %(batch)s));\n")
    settings = load_settings(config, db_url=db_url)
    report = deploy(Database(db_url), settings, DeployOptions(extra_migrations=[folder]), echo=lambda _m: None)
    assert report.applied == ["0099_probe"]
    # --check looks at what the head migration's outside part built (nothing is left undone)
    deploy(Database(db_url), settings, DeployOptions(extra_migrations=[folder], check=True), echo=lambda _m: None)
    pinned.execute(f"drop table {ident(SCHEMA)}.probe")
    pinned.execute(f"delete from {ident(SCHEMA)}.schema_migrations where version = '0099'")


def _deploy_over_older_functions(db_url: str, config: Path, pinned: Session) -> None:
    """A deploy over what an older jobkit left: a function whose return type changed (dropped and
    created anew) and a migration recorded with its pre-recut checksum (recorded anew)."""
    s = ident(SCHEMA)
    pinned.execute(f"drop function {s}.sweep_dead()")
    pinned.execute(f"create function {s}.sweep_dead() returns int language sql as 'select 0'")
    pinned.execute(f"update {s}.schema_migrations set checksum = 'pre-recut' where version = '0002'")
    settings = load_settings(config, db_url=db_url)
    report = deploy(Database(db_url), settings, DeployOptions(), echo=lambda _m: None)
    assert report.functions_changed == [f"1 changed: function {SCHEMA}.sweep_dead()"]
    assert pinned.scalar(f"select checksum from {s}.schema_migrations where version = '0002'") != "pre-recut"


def _user_api(pinned: Session) -> None:
    """An app user's requests, as PostgREST runs them (role and JWT claims), on the planted session."""
    claims = '{"role": "authenticated", "sub": "6f1c0a52-8a6e-4c1b-9d1e-3f2a9b7c5d40"}'
    pinned.execute("select set_config('request.jwt.claims', %s, false)", (claims,))
    pinned.execute("set role authenticated")
    try:
        job = pinned.scalar("select jobkit_user.enqueue('mail', '{\"to\": \"a@example.org\"}')")
        assert pinned.scalar("select count(*) from jobkit_user.jobs") == 1
        pinned.execute("reset role")  # a step of the user's job: its row shows it (sync_steps)
        pinned.execute(f"insert into {ident(SCHEMA)}.job_steps (job_id, name, occurrence, attempt, status, "
                       "started_at) values (%s, 'a', 1, 1, 'completed', pg_catalog.now())", (job,))
        pinned.execute("set role authenticated")
        assert pinned.scalar("select step from jobkit_user.jobs") == "a"
        assert pinned.scalar("select jobkit_user.cancel(%s)", (job,)) is True
    finally:
        pinned.execute("reset role")
        pinned.execute("select set_config('request.jwt.claims', '', false)")


def _dashboard(db_url: str, pinned: Session) -> None:
    """Every dashboard page and action (tests/integration/test_dashboard.py checks what they do)."""
    import re

    from jobkit.dashboard import Dashboard
    from starlette.testclient import TestClient

    dashboard = Dashboard(db_url, Settings(db_url=db_url), count_bound=0)  # 0: every count estimated too
    html = {"accept": "text/html"}
    schema = ident(SCHEMA)
    _present(Lifecycle(pinned, SCHEMA))  # a live worker: /workers reads the jobs it holds
    try:
        with TestClient(dashboard.app, base_url="http://127.0.0.1", follow_redirects=False) as client:
            job = pinned.scalar(f"select id from {schema}.jobs limit 1")
            # the job page of a job waiting for jobs (ctx.wait_for_jobs) reads them too
            pinned.execute(f"insert into {schema}.job_waits (job_id, type, step, occurrence, attempt, kind, "
                           "job_ids, due) select id, type, 'children', 1, 1, 'jobs', array[id], "
                           "now() + interval '1 hour' from " + f"{schema}.jobs where id = %s", (job,))
            for path in ("/", "/fragments/overview", "/jobs", "/jobs?type=mail&status=completed&since=2020-01-01"
                         "&until=2100-01-01&worker=w&error=x&payload=%7B%22a%22%3A1%7D", f"/jobs/{job}",
                         "/schedules", "/ratelimits", "/actions", "/fragments/jobs?type=mail",
                         "/jobs?cursor=2100-01-01T00:00:00%2B00:00%7C" + str(job), "/workers",
                         "/fragments/workers"):
                assert client.get(path, headers=html).status_code == 200, path
            pinned.execute(f"delete from {schema}.job_waits where job_id = %s", (job,))
            token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/", headers=html).text)
            assert token
            csrf = token.group(1)
            ids = [str(r["id"]) for r in pinned.all(f"select id from {schema}.jobs limit 3")]
            for form in ({"verb": "retry", "scope": "filter"}, {"verb": "cancel", "scope": "ids", "ids": ids},
                         {"verb": "delete", "scope": "ids", "ids": ids[:1]}):
                assert client.post("/actions/confirm", data={"csrf": csrf, **form}).status_code == 200
                run = client.post("/actions/run", data={"csrf": csrf, "matched": "1", **form})
                assert run.status_code == 303, run.text
                progress = run.headers["location"] + "/progress"
                wait_for(lambda: 'id="done"' in client.get(progress, headers=html).text, 30,  # noqa: B023 (called here)
                         "the action finished")
            for active in ("false", "true"):
                assert client.post("/types/active", data={"csrf": csrf, "type": "mail",
                                                          "active": active}).status_code == 303
            name = re.search(r'name="name" value="([^"]+)"', client.get("/schedules", headers=html).text)
            if name:
                for active in ("false", "true"):
                    client.post("/schedules/active", data={"csrf": csrf, "name": name.group(1), "active": active})
                for _ in range(2):  # run now, twice: the second sweeps the first one's one-off job first
                    assert client.post("/schedules/run", data={"csrf": csrf, "name": name.group(1)}).status_code == 303
                _drop_one_offs(db_url)
    finally:
        dashboard.close()


def _drop_one_offs(db_url: str) -> None:
    """The "run now" one-off jobs the dashboard step made: removed before pg_cron's minute comes."""
    from jobkit.cron import runnow

    cron = CronJobs(Database(db_url), Settings(db_url=db_url))
    for job in cron.every():
        if job.name.startswith(runnow.MARK):
            cron.delete(job)


# ---- the test -------------------------------------------------------------------------------------

def test_planted_objects_never_run(
    planted: Calls, executed: Executed, db_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "jobkit.toml"
    pinned = planted.app
    steps: list[tuple[str, Callable[[], object]]] = [
        ("deploy", lambda: _deploy(config, db_url)),
        ("deploy behind a held lock", lambda: _locked_deploy(config, db_url)),
        ("row triggers", lambda: _row_triggers(config, db_url)),
        ("enqueue", lambda: _enqueue(db_url, config)),
        ("worker", lambda: _drain(db_url)),
        ("job manager", lambda: _with_session(db_url, _manager)),
        ("cli", lambda: _cli_paths(config, db_url, pinned)),
        ("endpoint", lambda: _endpoint(db_url, None, pinned)),
        ("endpoint --listen", lambda: _endpoint(db_url, f"{SCHEMA}_wake", pinned)),
        ("doctor", lambda: _doctor(config, db_url, pinned)),
        ("doctor table rows", lambda: _table_rows(config, db_url)),
        ("deploy a migration", lambda: _deploy_migration(db_url, config, tmp_path, pinned)),
        ("deploy over older functions", lambda: _deploy_over_older_functions(db_url, config, pinned)),
        ("cron commands", lambda: _cron_commands(config, db_url, planted.cron)),
        ("dashboard", lambda: _dashboard(db_url, pinned)),
        ("user api", lambda: _user_api(pinned)),
    ]
    for name, step in steps:
        step()
        planted.collect(name)
    assert planted.steps == {}, "planted objects ran:\n" + "\n".join(
        f"  {step}: {', '.join(names)}" for step, names in planted.steps.items())
    unused = sorted(name for name, text in queries(SCHEMA).items() if text not in executed.seen)
    assert unused == [], f"queries no step ran: {unused}"
    _sent_qualified(executed)


def _sent_qualified(executed: Executed) -> None:
    """Nothing jobkit's code sent on any path leaves a name to the search_path: every statement names
    its functions, operators, types and relations with their schema; every script (migrations and
    the API schemas: DDL that is frozen once released) pins search_path first."""
    assert len(executed.statements) > 100 and executed.scripts
    found = {sql: names for sql in executed.statements
             if (names := unqualified(re.sub(r"\{(\w+)\}", r'"\1"', sql)))}  # {name}: an identifier
    assert found == {}
    pin = "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', TRUE)"
    unpinned = [script[:200] for script in executed.scripts
                if RawStream()(pglast.parse_sql(script)[0].stmt) != pin]
    assert unpinned == []


def _with_session(db_url: str, body: Callable[[Session], None]) -> None:
    with Database(db_url).session() as session:
        body(session)


def test_grants_are_immune(planted: Calls, db_url: str) -> None:
    """The grants block (sql/functions/99_grants.sql) runs as a deploy runs it: after the bootstrap,
    whose first statement pins search_path for the transaction. Its format() calls name pg_catalog
    too, so a planted format(text, text, text) does not win."""
    settings = Settings(db_url=db_url)
    grants = render_function_file(Settings(schema=SCHEMA), "99_grants.sql")
    with Database(db_url).session() as session:
        session.script(render_bootstrap(settings) + "\n" + grants)  # one implicit transaction
    planted.collect("99_grants.sql")
    assert planted.steps == {}, f"planted objects ran: {planted.steps}"


# mallory's operator of issue 21 (item 3): concatenating text and an integer, an exact fit where
# pg_catalog only has the polymorphic ||(text, anynonarray); run by a superuser, it makes her one.
ESCALATING_CONCAT = """
create table public.planted_calls (name text);
grant insert, select, delete on public.planted_calls to public;
create function public.concat_text_integer(a text, b integer) returns text language plpgsql as $f$
begin
    insert into public.planted_calls values ('||(text, integer)');
    if (select rolsuper from pg_catalog.pg_roles where rolname operator(pg_catalog.=) current_user) then
        execute 'alter role mallory superuser';
    end if;
    return a operator(pg_catalog.||) b::pg_catalog.text;
end
$f$;
create operator public.|| (function = public.concat_text_integer, leftarg = text, rightarg = integer);
"""

FAIR_CONFIG = """
schema = "jobkit"

[types.tenant]
concurrency_key = "t:{payload.t}"
max_running_per_key = 2
max_running = 10
"""


def test_doctor_runs_no_operator_planted_in_public(admin: Session, db_url: str, tmp_path: Path) -> None:
    """`jobkit doctor` listed fair types as `type || ' ' || max_running_per_key || '/key'`: the
    owner ran mallory's public.||(text, integer), and mallory became superuser."""
    config = tmp_path / "jobkit.toml"
    config.write_text(FAIR_CONFIG)
    _cli(config, "deploy", "--db-url", db_url)
    _drop_roles(admin)
    admin.execute_with_identifiers("create role {r} nologin", r=MALLORY)
    try:
        with Database(db_url).session() as pinned:
            pinned.execute("set search_path = pg_catalog, pg_temp")
            pinned.execute_with_identifiers("grant create on schema public to {r}", r=MALLORY)
            pinned.execute_with_identifiers("set role {r}", r=MALLORY)
            pinned.script(ESCALATING_CONCAT)
            pinned.execute("reset role")
            try:
                checks = doctor.run(Database(db_url), load_settings(config, db_url=db_url))
                shown = CliRunner().invoke(cli, ["-c", str(config), "doctor", "--db-url", db_url]).output
                ran = [r["name"] for r in pinned.all("select name from public.planted_calls")]
                superuser = pinned.scalar("select rolsuper from pg_roles where rolname = %s", (MALLORY,))
            finally:
                pinned.execute_with_identifiers("drop owned by {r}", r=MALLORY)
    finally:
        _drop_roles(admin)
    assert (ran, superuser) == ([], False)
    concurrency = next(c for c in checks if c.name == "concurrency")
    assert "fair types: tenant 2/key 10 max" in concurrency.detail
    assert "tenant 2/key 10 max" in shown


def test_every_function_pins_an_empty_search_path(db_url: str, tmp_path: Path) -> None:
    """Every function jobkit creates, in its schema, the Data API's and the per-user API's (trigger
    functions included), resolves names in pg_catalog only, whoever calls it and from where."""
    config = tmp_path / "jobkit.toml"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(SHOP)
    config.write_text(CONFIG.format(extra=TRIGGERS.format(when="new.status = 'paid'")))
    _cli(config, "deploy", "--db-url", db_url)
    with Database(db_url).session() as session:
        rows = session.all(
            "select p.oid::pg_catalog.regprocedure::pg_catalog.text as function, p.prokind, p.proconfig "
            "from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace "
            "where n.nspname = any(%s)", ([SCHEMA, "jobkit_api", "jobkit_user"],))
    assert len(rows) > 50 and any(r["function"].startswith("jobkit_user.") for r in rows)
    assert any(r["function"].startswith("jobkit.rowtrigger_") for r in rows)  # row triggers' (issue 24)
    assert {r["prokind"] for r in rows} == {"f"}
    unpinned = [r["function"] for r in rows if 'search_path=""' not in (r["proconfig"] or [])]
    assert unpinned == []


# What jobkit's deploy stored (defaults, constraints, indexes, views, policies, triggers) that refers
# to a function, operator or type of `public`.
BOUND_TO_PUBLIC = """
select pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) as stored,
       pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid) as refers_to
from pg_catalog.pg_depend d
where d.classid operator(pg_catalog.=) any (array['pg_attrdef', 'pg_constraint', 'pg_class', 'pg_rewrite',
                                                  'pg_policy', 'pg_trigger']::pg_catalog.regclass[])
  and 'public'::pg_catalog.regnamespace operator(pg_catalog.=) case d.refclassid
      when 'pg_proc'::pg_catalog.regclass
          then (select p.pronamespace from pg_catalog.pg_proc p where p.oid operator(pg_catalog.=) d.refobjid)
      when 'pg_operator'::pg_catalog.regclass
          then (select o.oprnamespace from pg_catalog.pg_operator o where o.oid operator(pg_catalog.=) d.refobjid)
      when 'pg_type'::pg_catalog.regclass
          then (select t.typnamespace from pg_catalog.pg_type t where t.oid operator(pg_catalog.=) d.refobjid) end
"""


def test_deploy_binds_nothing_planted(admin: Session, fresh_db: str, tmp_path: Path) -> None:
    """A first deploy into a database whose search_path puts `public` (holding mallory's plants and
    copies of the built-ins) ahead of pg_catalog: every migration, the Data API and the per-user
    API run after the bootstrap's search_path pin, so no default, constraint, index, policy or
    trigger binds a planted object, and none runs."""
    config = tmp_path / "jobkit.toml"
    config.write_text(CONFIG.format(extra=""))
    _drop_roles(admin)
    admin.execute_with_identifiers("create role {r} nologin", r=MALLORY)
    try:
        with Database(fresh_db).session() as pinned:
            pinned.execute("set search_path = pg_catalog, pg_temp")
            pinned.execute_with_identifiers("grant create on schema public to {r}", r=MALLORY)
            pinned.execute_with_identifiers("set role {r}", r=MALLORY)
            pinned.script(_plant_sql())
            assert _copy_builtins(pinned) > 300
            pinned.execute("reset role")
            pinned.execute_with_identifiers("alter database {db} set search_path = public, pg_catalog",
                                            db=Database(fresh_db).dbname)
            try:
                _cli(config, "deploy", "--db-url", fresh_db)
                jobkit.enqueue(fresh_db, "mail", {"to": "a"})  # the defaults and triggers of a row
                ran = [r["name"] for r in pinned.all("select name from public.planted_calls")]
                bound = pinned.all(BOUND_TO_PUBLIC)
            finally:
                pinned.execute_with_identifiers("alter database {db} reset search_path",
                                                db=Database(fresh_db).dbname)
                pinned.execute_with_identifiers("drop owned by {r}", r=MALLORY)
    finally:
        _drop_roles(admin)
    assert (ran, bound) == ([], [])
