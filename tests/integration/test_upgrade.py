"""Upgrades from every version ever deployed (issue 21, Found 11 / Build 7).

A database deployed before the migrations were squashed (0001_core..0005_delivery, main up to
57b8576) is recognised by its exact history rows and brought to head by a plain `jobkit deploy`;
so is a database at 0001_baseline only. The pre-squash SQL is kept under tests/fixtures/presquash/
as `jobkit deploy` rendered it then (schema jobkit; rendered from `git show <commit>:sql/...` once,
so a shallow clone can still deploy it), and each file's sha256 must be the checksum
jobkit.schema.presquash records for it.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from jobkit.queries import queries
from jobkit.schema import presquash
from jobkit.schema.migrations import bridge_sql
from jobkit.schema.render import render_bootstrap, render_migrations
from prerecut import deploy_prerecut
from test_schema_drift import describe
from versions import HEAD

FIXTURES = Path(__file__).parents[1] / "fixtures" / "presquash"
EDE = [f"ede9fd6/{n}.sql" for n in ("0001_core", "0002_wake", "0003_worker", "0004_hot_path")]
FILES = {  # each bridged layout (by its first commit on main) -> its rendered migrations, in order
    "d02410c": EDE[:3],
    "5629121": [*EDE[:3], "5629121/0004_hot_path.sql"],
    "c1f365e": [*EDE[:3], "c1f365e/0004_hot_path.sql"],
    "b0c33b0": [*EDE[:3], "b0c33b0/0004_hot_path.sql"],
    "ede9fd6": EDE,
    "4fd40c1": [*EDE, "4fd40c1/0005_delivery.sql"],
    "bfdb5ad": [*EDE, "bfdb5ad/0005_delivery.sql"],
    "3118562": [f"3118562/{n}.sql" for n in ("0001_core", "0002_wake", "0003_worker", "0004_hot_path",
                                               "0005_delivery")],
}
SECRET = "s3cret-" + "x" * 40
CONFIG = """schema = "jobkit"

[types.email]
max_attempts = 5
rate_limit = "smtp"

[ratelimits.smtp]
rate = "10/s"
burst = 20

[schedules.nightly]
cron = "0 3 * * *"
type = "report"

[maintenance]  # no tick may change a job while the test compares them
sweep-dead = "off"
prune = "off"
"""
JOB_COLUMNS = ("id", "type", "status", "attempts", "max_attempts", "payload", "result", "last_error", "priority",
               "scheduled_for", "started_at", "completed_at", "lease_expires_at", "worker_id", "idempotency_key")


def _layout(first: str) -> presquash.Layout:
    return next(layout for layout in presquash.LAYOUTS if layout.first == first)


def deploy_presquash(url: str, first: str) -> None:
    """Deploy a pre-squash layout as its `jobkit deploy` did: per migration one transaction with the
    bootstrap (unchanged since), the rendered migration and its history row."""
    layout = _layout(first)
    with Database(url).session() as s:
        for (version, name, checksum), rel in zip(layout.rows, FILES[first], strict=True):
            text = (FIXTURES / rel).read_bytes().decode("utf-8")
            assert rel.endswith(f"{version}_{name}.sql")
            assert hashlib.sha256(text.encode()).hexdigest() == checksum, f"{rel} is not what {first} deployed"
            with s.transaction():
                s.script(render_bootstrap(Settings()))
                s.script(text)
                s.execute("insert into jobkit.schema_migrations (version, name, checksum) values (%s, %s, %s)",
                          (version, name, checksum))


def deploy_baseline(url: str) -> None:
    """A database at 0001_baseline only (the first release after the squash), as deployed then."""
    deploy_prerecut(url, through="0001")


def fill(url: str, admin: Session) -> dict[str, Any]:
    """Jobs in every state, attempt history, a type's settings, rate limits, the worker's secret and
    URL, and schedules (built-in, declared, added by hand) as the old jobkit stored them."""
    with Database(url).session() as s:
        ids = {}
        for status, extra in [
            ("pending", {}),
            ("pending", {"scheduled_for": "2999-01-01T00:00:00Z", "idempotency_key": "later"}),
            ("processing", {"attempts": 1, "started_at": "now", "lease_expires_at": "2999-01-01T00:00:00Z",
                            "worker_id": "w-old"}),
            ("completed", {"attempts": 1, "result": '{"sent": true}', "completed_at": "now"}),
            ("failed", {"attempts": 3, "last_error": "smtp said no", "completed_at": "now"}),
            ("dead", {"attempts": 5, "last_error": "gave up", "completed_at": "now"}),
            ("cancelled", {"completed_at": "now"}),
        ]:
            columns = ["type", "payload", "status", "priority", *extra]
            values = ["email", f'{{"to": "{status}@example.com", "n": {len(ids)}}}', status, len(ids),
                      *extra.values()]
            ids[f"{status}{len(ids)}"] = s.scalar(
                "insert into jobkit.jobs ({}) values ({}) returning id".format(  # noqa: S608 - fixed names
                    ", ".join(columns), ", ".join(["%s"] * len(values))), values)
        failed = next(v for k, v in ids.items() if k.startswith("failed"))
        s.execute("insert into jobkit.job_attempts (job_id, attempt, worker_id, started_at, outcome, error) "
                  "values (%s, 1, 'w-old', now(), 'retry', 'smtp timeout')", (failed,))
        s.execute("insert into jobkit.job_types (type, max_attempts, lease, backoff_base, backoff_factor, "
                  "backoff_cap, backoff_jitter, rate_limit) values ('email', 5, '5 minutes', '30 seconds', 4, "
                  "'1 hour', 0.1, 'smtp')")
        s.execute("insert into jobkit.rate_limits (key, rate, burst, tokens) values ('smtp', 10, 20, 7), "
                  "('by_hand', 0.5, 3, 2)")
        s.execute("insert into jobkit.secrets (name, value) values ('worker_url', 'http://127.0.0.1:9/run')")
        if s.scalar("select to_regprocedure('jobkit.set_worker_secret(text, interval)') is not null"):
            s.execute("select jobkit.set_worker_secret(%s)", (SECRET,))
        else:  # before 0005_delivery the worker authenticated with a bearer token
            s.execute("insert into jobkit.secrets (name, value) values ('worker_token', %s)", (SECRET,))
    database = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    prefix = f"jobkit:{database}.jobkit:"  # the cluster's pg_cron lives in database postgres
    schedules = {
        "sweep-stuck": ("* * * * *", "select count(*) from \"jobkit\".sweep_stuck()", "config"),
        "nightly": ("0 3 * * *", "select \"jobkit\".wake('report')", "config"),
        "by-hand": ("*/5 * * * *", "select 1", "cli"),
    }
    for name, (schedule, command, origin) in schedules.items():
        admin.execute("select cron.schedule_in_database(%s, %s, %s, %s)",
                      (prefix + name, schedule, command, database))
        with Database(url).session() as s:
            s.execute("insert into jobkit.schedules (name, origin) values (%s, %s)", (name, origin))
    return {"ids": ids, "jobs": jobs(url), "prefix": prefix, "database": database}


def jobs(url: str) -> list[tuple[Any, ...]]:
    with Database(url).session() as s:
        return [tuple(r[c] for c in JOB_COLUMNS)
                for r in s.all(f"select {', '.join(JOB_COLUMNS)} from jobkit.jobs order by priority")]  # noqa: S608


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def module_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("upgrade") / "jobkit.toml"
    path.write_text(CONFIG)
    return str(path)


@pytest.fixture
def config(module_config: str) -> str:
    return module_config


@pytest.fixture(scope="module")
def fresh_install(cluster: LocalCluster, admin: Session, module_config: str) -> list[str]:
    """What describe() says of a fresh install with the same jobkit.toml (once per module)."""
    name = f"t_fresh_{uuid.uuid4().hex[:8]}"
    admin.execute_with_identifiers("create database {name}", name=name)
    try:
        url = cluster.url(name)
        result = run("-c", module_config, "deploy", "--db-url", url)
        assert result.exit_code == 0, result.output
        return describe(url)
    finally:
        admin.execute("select cron.unschedule(jobid) from cron.job where database = %s", (name,))
        admin.execute_with_identifiers("drop database if exists {name} with (force)", name=name)


def no_drift(upgraded: str, fresh: list[str]) -> None:
    """The upgraded schema is a fresh install's, object by object, except the position of jobs'
    columns: two columns the last pre-squash layout added at the end are placed earlier by the
    baseline, and moving them would rewrite the table (sql/bridge/squash.sql)."""
    def normalised(lines: list[str]) -> list[str]:
        return sorted(re.sub(r"^(column \S+) #\d+ ", r"\1 ", line) for line in lines)
    assert normalised(describe(upgraded)) == normalised(fresh)


def check_upgraded(url: str, before: dict[str, Any], config: str, admin: Session) -> None:
    assert jobs(url) == before["jobs"]  # every job, with its state, attempts, payload and result
    with Database(url).session() as s:
        assert [r["version"] for r in s.all("select version from jobkit.schema_migrations order by 1")][-1] == HEAD
        assert s.scalar("select count(*) from jobkit.job_attempts where error = 'smtp timeout'") == 1
        assert s.all("select key, rate, burst from jobkit.rate_limits order by key") == [
            {"key": "by_hand", "rate": 0.5, "burst": 3}, {"key": "smtp", "rate": 10, "burst": 20}]
        assert s.scalar("select rate_limit from jobkit.job_types where type = 'email'") == "smtp"
        # what the worker reads to verify signed wake-ups
        assert s.one(queries("jobkit")["worker_keys"])["current_secret"] == SECRET  # type: ignore[index]
        # the upgraded schema runs: the due job is claimed with its payload
        [claimed] = Lifecycle(s).claim("email", 10, "w-new", timedelta(seconds=30))
        assert claimed.id == before["ids"]["pending0"] and claimed.payload == {"to": "pending@example.com", "n": 0}
    commands = {r["jobname"]: r["command"] for r in admin.all(
        "select jobname, command from cron.job where database = %s", (before["database"],))}
    prefix = before["prefix"]
    assert commands[prefix + "nightly"] == "select \"jobkit\".wake('report')"
    assert commands[prefix + "by-hand"] == "select 1"  # added by hand: left alone
    assert commands[prefix + "sweep-stuck"] == "select pg_catalog.count(*) from \"jobkit\".sweep_stuck()"
    check = run("-c", config, "deploy", "--check", "--db-url", url)
    assert check.exit_code == 0, check.output


@pytest.mark.parametrize("first", ["ede9fd6", "3118562"])
def test_a_presquash_deployment_upgrades_with_a_plain_deploy(
        first: str, fresh_db: str, fresh_install: list[str], config: str, admin: Session) -> None:
    deploy_presquash(fresh_db, first)
    before = fill(fresh_db, admin)
    files = _files(fresh_db)
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 0, result.output
    assert f"applied upgrade bridge from {_layout(first).label}" in result.output
    after = _files(fresh_db)
    assert {name: after[name] for name in files} == files  # live-safe: no table was rewritten
    check_upgraded(fresh_db, before, config, admin)
    no_drift(fresh_db, fresh_install)


def _files(url: str) -> dict[str, int]:
    """Each jobkit table's file node (a rewrite gives the table a new one)."""
    with Database(url).session() as s:
        return {r["relname"]: r["node"] for r in s.all(
            "select relname, pg_relation_filenode(oid) as node from pg_class "
            "where relnamespace = 'jobkit'::regnamespace and relkind = 'r'")}


def test_a_deployment_at_0001_baseline_upgrades_with_a_plain_deploy(
        fresh_db: str, fresh_install: list[str], config: str, admin: Session) -> None:
    deploy_baseline(fresh_db)
    before = fill(fresh_db, admin)
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 0, result.output
    check_upgraded(fresh_db, before, config, admin)
    assert describe(fresh_db) == fresh_install


@pytest.mark.parametrize("first", ["d02410c", "5629121", "c1f365e", "b0c33b0", "4fd40c1", "bfdb5ad"])
def test_every_other_bridged_layout_reaches_a_fresh_installs_schema(
        first: str, fresh_db: str, fresh_install: list[str], config: str) -> None:
    deploy_presquash(fresh_db, first)
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 0, result.output
    assert f"applied upgrade bridge from {_layout(first).label}" in result.output
    assert run("-c", config, "deploy", "--check", "--db-url", fresh_db).exit_code == 0
    no_drift(fresh_db, fresh_install)


def test_a_deployment_from_before_the_recut_upgrades_with_a_plain_deploy(
        fresh_db: str, fresh_install: list[str], config: str, admin: Session) -> None:
    """Issue 22 rewrote migrations 0001..0013 (their functions moved to sql/functions/): a database
    that applied the old ones keeps every job, has its history rows recorded with the new
    checksums, keeps the EXECUTE grants roles of its own held, and is a fresh install's schema."""
    deploy_prerecut(fresh_db)
    with Database(fresh_db).session() as s:
        s.execute("do $$ begin if not exists (select from pg_roles where rolname = 'app_producer') then "
                  "create role app_producer; end if; end $$")
        s.execute("grant usage on schema jobkit to app_producer")
        s.execute("grant execute on function jobkit.enqueue_many to app_producer")
    before = fill(fresh_db, admin)
    assert run("-c", config, "deploy", "--check", "--db-url", fresh_db).exit_code == 3
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 0, result.output
    check_upgraded(fresh_db, before, config, admin)
    with Database(fresh_db).session() as s:
        assert s.scalar("select has_function_privilege('app_producer', "
                        "'jobkit.enqueue_many(text[], jsonb[], int[], timestamptz[], int[], text[], jsonb, text[])', "
                        "'execute')")
        s.execute("revoke all on function jobkit.enqueue_many from app_producer")
        s.execute("revoke all on schema jobkit from app_producer")
    local = {m.version: m.checksum for m in render_migrations(Settings())}
    assert {v: c for v, _n, c in _history(fresh_db)} == local
    no_drift(fresh_db, fresh_install)


def _history(url: str) -> list[tuple[str, str, str]]:
    with Database(url).session() as s:
        return [(r["version"], r["name"], r["checksum"])
                for r in s.all("select version, name, checksum from jobkit.schema_migrations order by 1")]


def test_before_the_upgrade_every_command_says_to_run_deploy(fresh_db: str, config: str) -> None:
    deploy_presquash(fresh_db, "ede9fd6")
    for args in (["status"], ["jobs", "list"], ["enqueue", "email"], ["schedule", "list"]):
        result = run("-c", config, *args, "--db-url", fresh_db)
        assert result.exit_code == 1, (args, result.output)
        assert result.output.splitlines()[0] == (
            "error: jobkit's schema in database " + psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]
            + " was deployed by an older jobkit, from before its migrations were squashed "
            "(0001_core..0005_delivery): run `jobkit deploy`"), (args, result.output)
    doctor = run("-c", config, "doctor", "--db-url", fresh_db)
    assert doctor.exit_code != 0
    [schema] = [line for line in doctor.output.splitlines() if "schema" in line and "older jobkit" in line]
    assert "run `jobkit deploy`" in schema and "does not exist" not in doctor.output, doctor.output
    assert _history(fresh_db) == list(_layout("ede9fd6").rows)  # nothing was changed


def test_check_and_dry_run_describe_the_upgrade_and_change_nothing(fresh_db: str, config: str) -> None:
    deploy_presquash(fresh_db, "ede9fd6")
    check = run("-c", config, "deploy", "--check", "--db-url", fresh_db)
    assert check.exit_code == 3, check.output
    assert "deployed by a jobkit from before its migrations were squashed (main at ede9fd6" in check.output
    dry = run("-c", config, "deploy", "--dry-run", "--db-url", fresh_db)
    assert dry.exit_code == 0, dry.output
    assert "upgrade bridge from main at ede9fd6" in dry.output and "0008_fair_claims" in dry.output
    assert "delete from \"jobkit\".schema_migrations" in dry.output
    assert _history(fresh_db) == list(_layout("ede9fd6").rows)


def test_a_development_layout_without_a_bridge_is_refused_by_name(fresh_db: str, config: str) -> None:
    """Main's layouts before d02410c (its first afternoon, 0001_core..0003_worker edited in place)
    are known but not bridged: deploy names the layout and changes nothing."""
    deploy_presquash(fresh_db, "ede9fd6")
    older = _layout("1da10df")
    with Database(fresh_db).session() as s:  # the history rows that layout left
        s.execute("delete from jobkit.schema_migrations")
        for row in older.rows:
            s.execute("insert into jobkit.schema_migrations (version, name, checksum) values (%s, %s, %s)", row)
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        "error: the database holds a development layout of jobkit's schema, deployed by main at "
        "1da10df..7f22e9b (2026-12-02 14:35), which no upgrade bridge covers (bridges start at main's d02410c)"
    ), result.output
    assert _history(fresh_db) == list(older.rows)


def test_unknown_presquash_checksums_are_refused(fresh_db: str, config: str) -> None:
    deploy_presquash(fresh_db, "ede9fd6")
    with Database(fresh_db).session() as s:
        s.execute("update jobkit.schema_migrations set checksum = 'edited' where version = '0002'")
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 1
    assert "with migration checksums this jobkit does not know" in result.output.splitlines()[0]
    assert ("0002", "wake", "edited") in _history(fresh_db)


def test_a_failing_bridge_leaves_the_old_deployment_as_it_was(fresh_db: str, config: str) -> None:
    """Something in the way (here a constraint the bridge adds, already there) rolls the whole
    bridge back: the old history, schema and jobs stay, and the next deploy can try again."""
    deploy_presquash(fresh_db, "ede9fd6")
    with Database(fresh_db).session() as s:
        s.execute("alter table jobkit.jobs add constraint jobs_handler_max_attempts_check check (true)")
        job = s.scalar("insert into jobkit.jobs (type, payload) values ('email', '{}') returning id")
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 1
    assert result.output.startswith("error: the upgrade bridge from main at ede9fd6 (2026-12-02 17:46) failed and "
                                    "was rolled back: constraint \"jobs_handler_max_attempts_check\" for relation "
                                    "\"jobs\" already exists"), result.output
    assert _history(fresh_db) == list(_layout("ede9fd6").rows)
    with Database(fresh_db).session() as s:
        assert s.scalar("select count(*) from information_schema.columns where table_schema = 'jobkit' "
                        "and table_name = 'jobs' and column_name = 'round_start'") == 0
        assert s.scalar("select status from jobkit.jobs where id = %s", (job,)) == "pending"
        s.execute("alter table jobkit.jobs drop constraint jobs_handler_max_attempts_check")
    assert run("-c", config, "deploy", "--db-url", fresh_db).exit_code == 0
    assert _history(fresh_db)[-1][0] == HEAD


def _unvalidated(url: str) -> int:
    with Database(url).session() as s:
        return int(s.scalar("select count(*) from pg_constraint where conrelid = 'jobkit.jobs'::regclass "
                            "and not convalidated"))


def test_constraints_an_interrupted_upgrade_left_unvalidated_are_validated_by_the_next_deploy(
        fresh_db: str, config: str) -> None:
    """The bridge adds jobs' new check constraints NOT VALID and validates them in a transaction of
    its own; a deploy stopped between the two leaves them to the next deploy."""
    deploy_presquash(fresh_db, "ede9fd6")
    settings = Settings(db_url=fresh_db)
    with Database(fresh_db).session() as s, s.transaction():  # the bridge's transaction, and no more
        s.script(bridge_sql(settings, _layout("ede9fd6"), render_migrations(settings)[0]))
    assert _unvalidated(fresh_db) == 2
    result = run("-c", config, "deploy", "--db-url", fresh_db)
    assert result.exit_code == 0, result.output
    assert "upgrade bridge" not in result.output and _unvalidated(fresh_db) == 0
    assert _history(fresh_db)[-1][0] == HEAD
