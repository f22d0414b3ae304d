"""Issue 21's first-hour rough edges, each through the real CLI on a real database: a typo'd job
type is refused with a "did you mean" (Found 14), `jobs list/show` print the round's attempts over
the effective limit (15), `schedule remove` leaves a declared schedule alone (17), and validation
knows the longest name jobkit derives and the last time it can show (18)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jobkit
import pytest
from click.testing import CliRunner, Result
from jobkit.cli import cli
from jobkit.config import Settings, load_settings
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, DatabaseError
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from prerecut import deploy_prerecut


def _jobkit(db_url: str, *args: str, config: Path | None = None) -> Result:
    head = ["-c", str(config)] if config is not None else []
    return CliRunner().invoke(cli, [*head, *args, "--db-url", db_url])


def _count(session: Session, sql: str, *params: Any) -> int:
    return int(session.scalar(sql, params or None))


def _one_error(result: Result, *, message: str, hint: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 2 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error: ") and message in lines[0], result.output
    assert lines[1].startswith("hint: ") and hint in lines[1], result.output


# ---- Found 14: typos pass silently ----------------------------------------------------------------


def test_enqueue_refuses_a_type_it_never_heard_of_and_suggests_the_known_one(
        db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue(NewJob("send_email", {}))
    refused = _jobkit(db_url, "enqueue", "sned_emial", "--payload", '{"to": "a@example.com"}')
    _one_error(refused, message="job type 'sned_emial' is unknown",
               hint="did you mean send_email? to enqueue a new type on purpose, add --new-type")
    assert _count(session, "select count(*) from jobkit.jobs") == 1  # nothing enqueued
    assert _jobkit(db_url, "enqueue", "send_email").exit_code == 0  # a known type goes through


def test_new_type_introduces_a_type_and_it_stays_known(db_url: str, session: Session) -> None:
    first = _jobkit(db_url, "enqueue", "resize_image", "--new-type", "--payload", '{"id": 7}')
    assert first.exit_code == 0, first.output
    session.execute("delete from jobkit.jobs")  # its jobs done and pruned: still known
    again = _jobkit(db_url, "enqueue", "resize_image")
    assert again.exit_code == 0, again.output
    assert _count(session, "select count(*) from jobkit.jobs where type = 'resize_image'") == 1


def test_a_type_declared_in_jobkit_toml_is_known(db_url: str, tmp_path: Path, session: Session) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[types.report]\nmax_attempts = 2\n')
    assert _jobkit(db_url, "enqueue", "report", config=config).exit_code == 0
    assert _jobkit(db_url, "pause", "report", config=config).exit_code == 0
    refused = _jobkit(db_url, "enqueue", "reprot", config=config)
    _one_error(refused, message="'reprot' is unknown", hint="did you mean report?")


def test_a_type_a_worker_served_is_known(db_url: str, session: Session) -> None:
    jobs = Registry()

    @jobs.handler("thumbnail")
    async def thumbnail(_payload: Any, _ctx: Any) -> None:
        return None

    async def start_and_stop() -> None:
        endpoint = WorkerEndpoint(jobs, PostgresBackend(db_url), EndpointOptions(grace=timedelta(seconds=1)))
        await endpoint.start()
        await endpoint.stop()

    assert _jobkit(db_url, "enqueue", "thumbnail").exit_code == 1  # before any worker served it
    asyncio.run(start_and_stop())
    assert session.scalar("select array_agg(type) from jobkit.known_types") == ["thumbnail"]
    result = _jobkit(db_url, "enqueue", "thumbnail")
    assert result.exit_code == 0, result.output


def test_pause_refuses_an_unknown_type(db_url: str, manager: Lifecycle, session: Session) -> None:
    manager.enqueue(NewJob("nightly_report", {}))
    refused = _jobkit(db_url, "pause", "nightly_reprot")
    _one_error(refused, message="job type 'nightly_reprot' is unknown",
               hint="did you mean nightly_report? to pause a type no worker has served yet, declare it in "
               "jobkit.toml ([types.nightly_reprot])")
    for_key = _jobkit(db_url, "pause", "nosuchtype", "--key", "tenant:1")
    assert for_key.exit_code == 1 and "'nosuchtype' is unknown" in for_key.output
    assert _count(session, "select count(*) from jobkit.pauses") == 0
    assert _jobkit(db_url, "pause", "nightly_report").exit_code == 0


def test_the_python_api_takes_a_new_type_without_asking_the_database(db_url: str, session: Session) -> None:
    """The decision (README "Unknown job types"): jobkit.enqueue costs no extra query, and a
    producer may be deployed before the worker that serves its type."""
    job_id = jobkit.enqueue(db_url, "not_served_yet", {})
    assert session.scalar("select type from jobkit.jobs where id = %s", (job_id,)) == "not_served_yet"


# ---- Found 15: 1/None and attempt 2/1 ---------------------------------------------------------------


def test_jobs_list_and_show_print_the_effective_attempt_limit(db_url: str, manager: Lifecycle,
                                                              session: Session, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[types.mail]\nmax_attempts = 5\n')
    assert _jobkit(db_url, "deploy", config=config).exit_code == 0  # mail's limit: 5 in job_types
    plain, mail = manager.enqueue(NewJob("t", {})), manager.enqueue(NewJob("mail", {}))
    listed = _jobkit(db_url, "jobs", "list")
    assert "None" not in listed.output and "0/3" in listed.output and "0/5" in listed.output, listed.output
    assert "attempt 0/5" in _jobkit(db_url, "jobs", "show", str(mail)).output
    # a job of limit 1 that failed, retried by hand (a fresh round), then claimed again
    once = manager.enqueue(NewJob("t", {}, max_attempts=1))
    session.execute("update jobkit.jobs set attempts = 1, status = 'dead', completed_at = now() where id = %s",
                    (once,))
    assert _jobkit(db_url, "jobs", "retry", str(once)).exit_code == 0
    session.execute("update jobkit.jobs set attempts = 2 where id = %s", (once,))  # its next claim
    shown = _jobkit(db_url, "jobs", "show", str(once))
    assert f"{once}  t  pending  attempt 1/1 (2 in all)" in shown.output, shown.output
    assert "1/1 (2 in all)" in _jobkit(db_url, "jobs", "list", "--limit", "1").output
    assert "attempt 0/3" in _jobkit(db_url, "jobs", "show", str(plain)).output


# ---- Found 17: schedule remove of a declared schedule ------------------------------------------------


def test_schedule_remove_refuses_a_declared_schedule(db_url: str, tmp_path: Path, admin: Session) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('[schedules.nightly]\ncron = "0 3 * * *"\ntype = "report"\n')
    assert _jobkit(db_url, "deploy", config=config).exit_code == 0
    dbname = db_url.rsplit("/", 1)[1]
    count = "select count(*) from cron.job where jobname like '%%:nightly' and database = %s"
    assert admin.scalar(count, (dbname,)) == 1
    for with_config in (config, None):  # also run from elsewhere: deploy made it from jobkit.toml
        refused = _jobkit(db_url, "schedule", "remove", "nightly", config=with_config)
        _one_error(refused, message="schedule nightly is declared in jobkit.toml",
                   hint="delete [schedules.nightly] from jobkit.toml and run `jobkit deploy`")
    assert admin.scalar(count, (dbname,)) == 1
    assert _jobkit(db_url, "deploy", "--check", config=config).exit_code == 0  # no drift
    added = _jobkit(db_url, "schedule", "add", "adhoc", "--every", "5m", "--type", "report")
    assert added.exit_code == 0 and _jobkit(db_url, "schedule", "remove", "adhoc").exit_code == 0


# ---- Found 18: the longest derived name, the last time ------------------------------------------------


def _deploy(url: str, config: Path) -> Result:
    return CliRunner().invoke(cli, ["-c", str(config), "deploy", "--db-url", url])


def test_validation_refuses_a_schema_whose_cron_job_names_would_not_fit(fresh_db: str, tmp_path: Path) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text(f'schema = "{"s" * 40}"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})  # no database known: too long for any
    assert "pg_cron job name 'jobkit:?." in caught.value.message and ":prune-cron-history'" in caught.value.message
    assert "at most 35 characters" in caught.value.hint
    result = _deploy(fresh_db, config)
    assert result.exit_code == 1 and "is too long: jobkit derives the pg_cron job name" in result.output
    assert "s" * 40 not in [r for r in _schemas(fresh_db)]


def _schemas(url: str) -> list[str]:
    with Database(url).session() as s:
        return [r["nspname"] for r in s.all("select nspname from pg_namespace")]


def test_the_longest_schema_validation_allows_deploys_and_one_more_character_is_refused(
        fresh_db: str, tmp_path: Path) -> None:
    """Validation measures the names deploy makes: the limit it computes for this database is exact."""
    config = tmp_path / "jobkit.toml"
    config.write_text(f'schema = "{"s" * 60}"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, db_url=fresh_db, env={})
    longest = int(caught.value.hint.split("at most ")[1].split(" ")[0])
    assert f"in database {fresh_db.rsplit('/', 1)[1]}" in caught.value.message
    config.write_text(f'schema = "{"s" * (longest + 1)}"\n')
    assert _deploy(fresh_db, config).exit_code == 1
    config.write_text(f'schema = "{"s" * longest}"\n')
    result = _deploy(fresh_db, config)
    assert result.exit_code == 0, result.output
    assert "s" * longest in _schemas(fresh_db)


def test_a_run_at_past_the_year_9999_is_refused_at_every_entry(db_url: str, session: Session) -> None:
    last_day_west = datetime(9999, 12, 31, 12, tzinfo=timezone(timedelta(hours=-10)))
    for when in (datetime(9999, 12, 31, tzinfo=UTC), last_day_west, datetime(9999, 12, 31, 1)):
        with pytest.raises(ConfigError) as caught:
            jobkit.enqueue(db_url, "t", {}, run_at=when)
        assert "is too far ahead: jobkit's times end before 9999-12-31T00:00:00Z" in caught.value.message
    for sql in ("select jobkit.enqueue('t', '{}', 0, '294276-01-01')",
                "select jobkit.enqueue('t', '{}', 0, '9999-12-31 00:00:00+00')",
                "select * from jobkit.enqueue_many(array['t'], array['{}'::jsonb], null, "
                "array['10000-01-01'::timestamptz])"):
        with pytest.raises(DatabaseError) as refused:
            session.scalar(sql)
        assert "jobs_scheduled_for_year_9999" in refused.value.message
        assert "run_at must be before 9999-12-31T00:00:00Z" in refused.value.hint
    assert _count(session, "select count(*) from jobkit.jobs") == 0
    latest = jobkit.enqueue(db_url, "t", {}, run_at=datetime(9999, 12, 30, 23, 59, tzinfo=UTC))
    shown = _jobkit(db_url, "jobs", "show", str(latest))  # the latest time jobkit takes, shown
    assert shown.exit_code == 0 and str(latest) in shown.output, shown.output
    assert _jobkit(db_url, "jobs", "list").exit_code == 0


def test_migration_0012_repairs_times_past_the_year_9999(fresh_db: str) -> None:
    from jobkit.schema.deploy import DeployOptions, deploy

    quiet = {"echo": lambda _m: None}
    deploy_prerecut(fresh_db, through="0011")  # 0001..0011 as they were deployed, with their functions
    with Database(fresh_db).session() as s:
        never = s.scalar("select jobkit.enqueue('t', '{\"n\": 1}', 0, '294276-01-01')")
        done = s.scalar("select jobkit.enqueue('t', '{\"n\": 2}', 0, '12000-01-01')")
        s.execute("update jobkit.jobs set status = 'completed', completed_at = now() where id = %s", (done,))
    report = deploy(Database(fresh_db), Settings(db_url=fresh_db), DeployOptions(schedules=False), **quiet)
    assert "0012_known_types" in report.applied
    with Database(fresh_db).session() as s:
        rows = {r["id"]: r for r in s.all("select id, status, scheduled_for = created_at as at_created, "
                                          "last_error from jobkit.jobs")}
    assert rows[never]["status"] == "cancelled" and rows[never]["at_created"]
    assert "run_at was after the year 9999" in rows[never]["last_error"]
    assert rows[done]["status"] == "completed" and rows[done]["at_created"]
    for job_id in (never, done):
        assert _jobkit(fresh_db, "jobs", "show", str(job_id)).exit_code == 0
