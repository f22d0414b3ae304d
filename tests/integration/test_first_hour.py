"""A new user's first mistakes get one line that names the fix, a non-zero exit, and no partial state:
commands run before `jobkit deploy`, a schema older than the installed jobkit, objects that do not
exist, actions a job's state does not allow, and `jobs retry --dead` past a conflict."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from jobkit.cli import cli
from jobkit.connector import Database, Session
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema import migrations
from jobkit.schema.render import Migration
from prerecut import deploy_prerecut
from versions import HEAD


def _jobkit(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--db-url", db_url])


def _schemas(url: str) -> list[str]:
    with Database(url).session() as s:
        return [r["nspname"] for r in s.all("select nspname from pg_namespace order by 1")]


NEEDS_THE_SCHEMA = [
    ("status",), ("enqueue", "send_email"), ("schedule", "list"), ("secrets", "show"), ("jobs", "list"),
    ("jobs", "show", str(uuid.UUID(int=1))), ("ratelimit", "list"), ("ratelimit", "set", "api", "--rate", "1/s"),
    ("schedule", "add", "nightly", "--cron", "0 3 * * *", "--type", "report"),
]


@pytest.mark.parametrize("args", NEEDS_THE_SCHEMA, ids=lambda a: " ".join(a[:2]))
def test_commands_before_deploy_say_so(args: tuple[str, ...], fresh_db: str) -> None:
    before = _schemas(fresh_db)
    result = _jobkit(fresh_db, *args)
    dbname = fresh_db.rsplit("/", 1)[1]
    assert result.exit_code == 1, result.output
    assert result.output.strip() == (
        f"error: jobkit is not deployed in database {dbname} (no schema jobkit): run `jobkit deploy`")
    assert _schemas(fresh_db) == before  # nothing created


def test_a_schema_older_than_jobkit_names_both_versions(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = migrations.render_migrations
    monkeypatch.setattr(migrations, "render_migrations",
                        lambda s, *a: [*packaged(s, *a), Migration("0099", "newer", "select 1;")])
    result = _jobkit(db_url, "status")
    assert result.exit_code == 1
    assert "schema in database" in result.output
    assert f"is at {HEAD}; this jobkit needs 0099: run `jobkit deploy`" in result.output


def test_missing_objects_and_wrong_states_point_the_right_way(db_url: str, manager: Lifecycle) -> None:
    missing = _jobkit(db_url, "jobs", "show", str(uuid.UUID(int=7)))
    assert missing.exit_code == 1
    assert missing.output.splitlines() == [f"error: no job {uuid.UUID(int=7)}", "hint: see `jobkit jobs list`"]
    job_id = manager.enqueue(NewJob("t", {}))
    wrong = _jobkit(db_url, "jobs", "retry", str(job_id))
    assert wrong.exit_code == 1 and "is pending: only failed, dead or cancelled jobs retry" in wrong.output
    assert "jobkit.toml" not in wrong.output  # not the configuration hint
    assert _jobkit(db_url, "schedule", "remove", "nope").output.startswith("error: no jobkit schedule named nope")
    assert _jobkit(db_url, "ratelimit", "remove", "nope").output.startswith("error: no rate limit named nope")


def test_retry_dead_goes_on_past_a_conflict_and_reports_it(db_url: str, manager: Lifecycle,
                                                            session: Session) -> None:
    old, plain = manager.enqueue_many([NewJob("t", {"n": 1}, idempotency_key="k"), NewJob("t", {"n": 2})])
    session.execute("update jobkit.jobs set status = 'dead', completed_at = now() where id = any(%s)",
                    ([old, plain],))
    newer = manager.enqueue(NewJob("t", {"n": 3}, idempotency_key="k"))  # the key is free again
    assert newer != old
    result = _jobkit(db_url, "jobs", "retry", "--dead", "--yes")
    assert result.exit_code == 1, result.output
    assert "retrying 1 job(s)" in result.output and f"not retried: {old}:" in result.output
    assert "1 job(s) could not be retried" in result.output
    statuses = {r["id"]: r["status"] for r in session.all("select id, status from jobkit.jobs")}
    assert statuses == {old: "dead", plain: "pending", newer: "pending"}


# ---- deploy checks everything before it changes anything ------------------------------------------


def _deploy_cli(url: str, config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["-c", str(config), "deploy", "--db-url", url, *args])


def _has_jobkit(url: str, schema: str = "jobkit") -> bool:
    return schema in _schemas(url)


def test_pg_cron_preloaded_but_not_created_refuses_before_any_migration(tmp_path: Path) -> None:
    """On a cluster of its own (dropping pg_cron on the shared one would confuse its launcher for
    every later test): pg_cron in shared_preload_libraries, the extension not created."""
    from clusters import running_cluster

    config = tmp_path / "jobkit.toml"
    config.write_text("")
    with running_cluster(tmp_path / "cluster") as local:
        url = local.status().url
        assert url is not None
        with Database(url).session() as s:
            s.execute("drop extension pg_cron")
            s.execute("create database app")
        app = url.rsplit("/", 1)[0] + "/app"
        result = _deploy_cli(app, config)
        assert result.exit_code == 1, result.output
        assert "the pg_cron extension is not created in database postgres" in result.output
        assert "create extension pg_cron" in result.output
        assert not _has_jobkit(app)  # no migration ran


def test_a_cron_job_name_too_long_for_this_pg_cron_refuses_before_any_migration(fresh_db: str,
                                                                               tmp_path: Path) -> None:
    """Validation takes pg_cron to run in jobkit's database (names "jobkit:<schedule>"); this one runs
    in postgres, so the names carry the database and schema: deploy's preflight refuses (a schema too
    long for any database is refused by validation: test_first_hour_edges.py)."""
    schedule = "n" * 40
    config = tmp_path / "jobkit.toml"
    config.write_text(f'[schedules.{schedule}]\ncron = "0 3 * * *"\ntype = "report"\n')
    result = _deploy_cli(fresh_db, config)
    assert result.exit_code == 1, result.output
    assert "longer than pg_cron's 63 bytes" in result.output and "use a shorter schema setting" in result.output
    assert "or a schedule name of at most 34 characters" in result.output
    assert not _has_jobkit(fresh_db)


def test_an_undeclared_rate_limit_refuses_before_any_migration(fresh_db: str, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[types.mail]\nrate_limit = "typo-limit"\n')
    result = _deploy_cli(fresh_db, config)
    assert result.exit_code == 1
    assert "[types.mail] rate_limit 'typo-limit' names no rate limit" in result.output
    assert "jobkit ratelimit set typo-limit" in result.output
    assert not _has_jobkit(fresh_db)


def test_a_rate_limit_set_in_the_database_counts_as_declared(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[types.mail]\nrate_limit = "from-cli"\n')
    assert _jobkit(db_url, "ratelimit", "set", "from-cli", "--rate", "10/s").exit_code == 0
    assert _deploy_cli(db_url, config).exit_code == 0


def test_dry_run_refuses_what_deploy_refuses(fresh_db: str, tmp_path: Path, admin: Session) -> None:
    """A 30-second schedule on Debian's pg_cron 1.4: deploy and --dry-run both refuse it up front
    (on pg_cron >= 1.5 both take it)."""
    seconds_ok = admin.scalar("select extversion from pg_extension where extname = 'pg_cron'") >= "1.5"
    config = tmp_path / "jobkit.toml"
    config.write_text('[schedules.fast]\nevery = "30s"\ntype = "mail"\n')
    for args in (("--dry-run",), ()):
        result = _deploy_cli(fresh_db, config, *args)
        if seconds_ok:
            assert result.exit_code == 0, (args, result.output)
            continue
        assert result.exit_code == 1, (args, result.output)
        assert "pg_cron >= 1.5" in result.output or "seconds" in result.output, result.output
        assert not _has_jobkit(fresh_db)


@pytest.mark.parametrize(("toml", "message"), [
    ('schema = "jobkit\\n"', "is not a valid schema name"),
    ('schema = "' + "s" * 59 + '"', "is too long: jobkit derives the pg_cron job name"),
    ('[types."mail\\n"]\nmax_attempts = 2', "is not a valid name"),
    ('[schedules."nightly\\n"]\ncron = "0 3 * * *"\ntype = "mail"', "nightly"),
    ('schema = "jobs"\n[api]\nschema = "jobs"', "[api] schema 'jobs' is jobkit's own schema"),
])
def test_invalid_config_is_one_line_and_changes_nothing(toml: str, message: str, fresh_db: str,
                                                       tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text(toml + "\n")
    result = _deploy_cli(fresh_db, config)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert "Traceback" not in result.output
    assert "jobkit" not in _schemas(fresh_db) and "jobs" not in _schemas(fresh_db)


# ---- no silent dead ends ---------------------------------------------------------------------------


def test_ratelimit_set_keeps_what_it_is_not_told(db_url: str) -> None:
    assert _jobkit(db_url, "ratelimit", "set", "api", "--rate", "60/min", "--burst", "10").exit_code == 0
    changed = _jobkit(db_url, "ratelimit", "set", "api", "--burst", "20")
    assert changed.exit_code == 0 and changed.output.strip() == "api: 60/min, burst 20"
    assert _jobkit(db_url, "ratelimit", "set", "api", "--rate", "2/s").output.strip() == "api: 120/min, burst 20"
    new = _jobkit(db_url, "ratelimit", "set", "fresh", "--burst", "5")
    assert new.exit_code == 1 and "rate limit fresh does not exist yet: give its --rate" in new.output
    assert _jobkit(db_url, "ratelimit", "set", "api").exit_code == 1  # nothing to change


def test_dev_stops_the_database_it_started_when_it_fails(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.endswith("DB_URL") and k != "DATABASE_URL"}
    env["JOBKIT_HOME"] = str(tmp_path / ".jobkit")
    run = [sys.executable, "-m", "jobkit"]
    try:
        result = subprocess.run([*run, "dev", "--app", "nope:jobs"], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "error: cannot import nope" in result.stderr and "stopped the local database" in result.stdout
        status = subprocess.run([*run, "db", "status"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert "running: no" in status.stdout, status.stdout + status.stderr
    finally:
        subprocess.run([*run, "db", "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=120)


def test_built_in_schedules_need_force_and_say_what_stops(db_url: str, admin: Session) -> None:
    assert _jobkit(db_url, "deploy").exit_code == 0  # with the built-in schedules
    refused = _jobkit(db_url, "schedule", "remove", "sweep-stuck")
    assert refused.exit_code == 1
    assert "schedule sweep-stuck is built in: jobs of crashed workers" in refused.output
    assert "--force" in refused.output and "[maintenance] sweep-stuck = \"off\"" in refused.output
    dbname = db_url.rsplit("/", 1)[1]
    count = "select count(*) from cron.job where jobname like %s and database = %s"
    assert admin.scalar(count, ("%sweep-stuck", dbname)) == 1  # still there
    forced = CliRunner().invoke(cli, ["schedule", "remove", "sweep-stuck", "--force", "--db-url", db_url])
    assert forced.exit_code == 0 and "warning: sweep-stuck is built in" in forced.output
    assert "the next `jobkit deploy` re-creates it" in forced.output
    assert admin.scalar(count, ("%sweep-stuck", dbname)) == 0


@pytest.mark.parametrize(("args", "message"), [
    (("--type", "bad type!"), "job type 'bad type!' is not a valid name"),
    (("--sql", "  "), "--sql is empty"),
])
def test_schedule_add_checks_its_target(args: tuple[str, ...], message: str, db_url: str, admin: Session) -> None:
    # this database's jobs: cron.job is the cluster's, and a one-off of another test's "Run now"
    # (in pg_cron's own database) unschedules itself when its minute comes
    mine = ("select count(*) from cron.job where database = %s", (db_url.rsplit("/", 1)[1],))
    before = admin.scalar(*mine)
    result = _jobkit(db_url, "schedule", "add", "nightly", "--cron", "0 3 * * *", *args)
    assert result.exit_code == 1 and message in result.output, result.output
    assert admin.scalar(*mine) == before


def test_jobs_list_shows_the_exceptions_line_not_the_traceback_header(db_url: str, manager: Lifecycle,
                                                                     session: Session) -> None:
    job_id = manager.enqueue(NewJob("t", {}))
    session.execute("update jobkit.jobs set last_error = %s where id = %s", (
        'Traceback (most recent call last):\n  File "jobs.py", line 3, in send\nValueError: no such mailbox\n',
        job_id))
    listed = _jobkit(db_url, "jobs", "list")
    assert "ValueError: no such mailbox" in listed.output and "Traceback" not in listed.output


def test_a_worker_that_no_wake_up_would_reach_is_warned(db_url: str, session: Session) -> None:
    from jobkit.config import Settings
    from jobkit.worker.endpoint import EndpointOptions
    from jobkit.worker.serve import WorkerOptions, transport_warning

    settings = Settings(db_url=db_url)
    http_only, listening = WorkerOptions(), WorkerOptions(endpoint=EndpointOptions(listen="jobkit_wake"))
    assert "nothing will wake it. Run it with --listen" in (transport_warning(settings, http_only) or "")
    assert transport_warning(settings, listening) is None
    session.execute("""update jobkit.settings set value = '"pg_net"' where key = 'transport'""")
    assert transport_warning(settings, http_only) is None
    assert "which nothing notifies" in (transport_warning(settings, listening) or "")


# ---- accepted, then broken: now refused up front, one line each -----------------------------------


def _jobs(session: Session) -> int:
    return int(session.scalar("select count(*) from jobkit.jobs"))


@pytest.mark.parametrize(("args", "message"), [
    (("enqueue", "t", "--delay", "99999999999d"), "too long a duration"),
    (("enqueue", "t" * 101), "is not a valid name"),
    (("enqueue", "t", "--priority", "3000000000"), "priority must be an integer from -2147483648"),
    (("enqueue", "t", "--payload", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    (("schedule", "add", "never", "--cron", "0 0 31 2 *", "--type", "t"), "never fires"),
])
def test_bad_values_are_one_line_and_change_nothing(args: tuple[str, ...], message: str, db_url: str,
                                                   session: Session, admin: Session) -> None:
    mine = ("select count(*) from cron.job where database = %s", (db_url.rsplit("/", 1)[1],))  # as above
    crons = admin.scalar(*mine)
    result = _jobkit(db_url, *args)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert len(result.output.splitlines()) <= 2  # error + hint
    assert _jobs(session) == 0 and admin.scalar(*mine) == crons


def test_a_payload_file_that_is_not_utf8(db_url: str, tmp_path: Path, session: Session) -> None:
    path = tmp_path / "payload.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    result = _jobkit(db_url, "enqueue", "t", "--payload", f"@{path}")
    assert result.exit_code == 1 and f"{path} is not UTF-8" in result.output
    assert _jobs(session) == 0


@pytest.mark.parametrize(("toml", "message"), [
    ('retention = "99999999999d"', "too long a duration"),
    ('[wake]\nbudget = "20m"', "[wake] budget must be at most 15m"),
    ('[wake]\ntimeout = "1h"', "[wake] timeout must be at most 5m"),
])
def test_settings_past_what_they_become_are_refused(toml: str, message: str, fresh_db: str,
                                                   tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text(toml + "\n")
    result = _deploy_cli(fresh_db, config)
    assert result.exit_code == 1 and message in result.output, result.output
    assert not _has_jobkit(fresh_db)


def test_worker_serve_with_a_port_out_of_range_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["worker", "serve", "jobs:jobs", "--port", "99999"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "99999 is not in the range 1<=x<=65535" in result.output


def test_an_infinite_run_at_is_refused_at_enqueue_with_the_reason(db_url: str, session: Session) -> None:
    from jobkit.exceptions import DatabaseError

    for when in ("infinity", "-infinity"):
        with pytest.raises(DatabaseError) as caught:
            session.scalar("select jobkit.enqueue('t', '{}', 0, %s::timestamptz)", (when,))
        assert "jobs_scheduled_for_finite" in caught.value.message
        assert caught.value.hint == "run_at must be a finite time: pass a real timestamp, not 'infinity'"
    assert _jobs(session) == 0
    assert _jobkit(db_url, "status").exit_code == 0


def test_migration_0002_repairs_infinite_rows_it_finds(fresh_db: str) -> None:
    from jobkit.config import Settings
    from jobkit.schema.deploy import DeployOptions, deploy

    quiet = {"echo": lambda _m: None}
    deploy_prerecut(fresh_db, through="0001")  # 0001 as it was deployed, with its functions
    with Database(fresh_db).session() as s:
        past = s.scalar("select jobkit.enqueue('t', '{\"n\": 1}', 0, '-infinity')")
        never = s.scalar("select jobkit.enqueue('t', '{\"n\": 2}', 0, 'infinity')")
    report = deploy(Database(fresh_db), Settings(db_url=fresh_db), DeployOptions(schedules=False), **quiet)
    assert report.applied[0] == "0002_finite_run_at"  # then the later migrations
    with Database(fresh_db).session() as s:
        rows = {r["id"]: r for r in s.all("select id, status, scheduled_for = created_at as at_created, "
                                          "last_error from jobkit.jobs")}
    assert rows[past]["status"] == "pending" and rows[past]["at_created"]
    assert rows[never]["status"] == "cancelled" and "run_at was infinity" in rows[never]["last_error"]


def test_deploy_reports_the_api_schema_and_check_notices_it_gone(fresh_db: str, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[api]\nschema = "jobkit_api"\n')
    first = _deploy_cli(fresh_db, config)
    assert first.exit_code == 0 and "[api] schema jobkit_api: +jobkit_api.claim(" in first.output
    again = _deploy_cli(fresh_db, config)
    assert "nothing changed" in again.output and "[api]" not in again.output
    assert _deploy_cli(fresh_db, config, "--check").exit_code == 0
    with Database(fresh_db).session() as s:
        s.execute("drop schema jobkit_api cascade")
    check = _deploy_cli(fresh_db, config, "--check")
    assert check.exit_code == 3 and "[api] schema jobkit_api: +jobkit_api." in check.output
    assert _deploy_cli(fresh_db, config).exit_code == 0
    assert "jobkit_api" in _schemas(fresh_db)


def test_doctor_counts_rows_before_the_first_analyze(db_url: str, manager: Lifecycle,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """reltuples is -1 until a table is analyzed: doctor counts instead of saying "about 0 rows"."""
    from jobkit.config import Settings
    from jobkit.ops import doctor

    manager.enqueue_many([NewJob("t", {"i": i}) for i in range(7)])
    monkeypatch.setattr(doctor, "SIZED_TABLES", ("jobkit.jobs",))  # a table this database has
    with Database(db_url).session() as s:
        assert s.scalar("select reltuples from pg_class where oid = 'jobkit.jobs'::regclass") < 0
        [check] = doctor.table_sizes(s, Settings(db_url=db_url), Database(db_url))
        assert check.detail.startswith("7 rows, ") and "about" not in check.detail
        s.execute("analyze jobkit.jobs")
        [check] = doctor.table_sizes(s, Settings(db_url=db_url), Database(db_url))
        assert check.detail.startswith("about 7 rows, ")


def test_times_are_iso_8601_in_every_command(db_url: str, manager: Lifecycle) -> None:
    import re

    manager.enqueue(NewJob("t", {}))
    assert _jobkit(db_url, "deploy").exit_code == 0
    iso = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
    listed = _jobkit(db_url, "jobs", "list")
    assert iso.search(listed.output), listed.output
    schedules = _jobkit(db_url, "schedule", "list")
    assert iso.search(schedules.output), schedules.output  # next run
    assert not re.search(r"\d{2}:\d{2}:\d{2} UTC|\d{2}:\d{2}:\d{2}\.\d+\+00", listed.output + schedules.output)


def test_deploy_restores_revoked_api_grants(fresh_db: str, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[api]\nschema = "jobkit_api"\n')
    assert _deploy_cli(fresh_db, config).exit_code == 0
    with Database(fresh_db).session() as s:
        s.execute("revoke execute on function jobkit_api.ping() from service_role")
    assert _deploy_cli(fresh_db, config, "--check").exit_code == 3
    assert _deploy_cli(fresh_db, config).exit_code == 0
    with Database(fresh_db).session() as s:
        assert s.scalar("select has_function_privilege('service_role', 'jobkit_api.ping()', 'execute')")
