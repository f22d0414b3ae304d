"""jobkit's pg_cron schedules: add, update, remove, pause, resume, deploy's sync and drift, and the
built-in sweeps and cleanups doing their work (run with their cron command text)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import ScheduleConfig, Settings
from jobkit.connector import Database, Session
from jobkit.cron import schedules as scheduling
from jobkit.exceptions import DriftError, NotFound
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy

BUILT_INS = ["prune", "prune-cron-history", "sweep-dead", "sweep-stuck", "wake"]


def _deploy(url: str, settings: Settings | None = None, **options: bool) -> list[str]:
    config = settings or Settings(db_url=url)
    report = deploy(Database(url), config, DeployOptions(**options), echo=lambda _m: None)
    return report.schedules_changed


def _cron(admin: Session, db_name: str) -> dict[str, dict[str, object]]:
    rows = admin.all("select jobname, schedule, command, database, active from cron.job "
                     "where database = %s or jobname like 'jobkit:' || %s || '.%%'", (db_name, db_name))
    return {str(r["jobname"]).rsplit(":", 1)[1]: r for r in rows}


@pytest.fixture
def user_job(admin: Session) -> Iterator[int]:
    """A cron job of the user's own that jobkit must never touch."""
    jobid = int(admin.scalar("select cron.schedule('my-own-report', '0 4 * * *', 'select 42')"))
    yield jobid
    admin.execute("select cron.unschedule(%s::bigint)", (jobid,))


def _name(url: str) -> str:
    return Database(url).dbname


def test_deploy_installs_the_built_in_schedules(db_url: str, admin: Session, user_job: int) -> None:
    changes = _deploy(db_url)
    assert sorted(line.split()[2] for line in changes) == BUILT_INS
    jobs = _cron(admin, _name(db_url))
    assert sorted(jobs) == BUILT_INS and all(j["active"] for j in jobs.values())
    assert jobs["sweep-stuck"]["schedule"] == "* * * * *"
    assert jobs["prune-cron-history"]["database"] == "postgres"  # runs where cron's tables are
    assert jobs["wake"]["database"] == _name(db_url)
    assert _deploy(db_url) == []
    assert _deploy(db_url, check=True) == []
    mine = admin.one("select schedule, command, active from cron.job where jobid = %s", (user_job,))
    assert mine == {"schedule": "0 4 * * *", "command": "select 42", "active": True}


def test_add_update_pause_resume_remove(db_url: str, admin: Session, user_job: int) -> None:
    settings = Settings(db_url=db_url)
    db = Database(db_url)
    scheduling.add(db, settings, "wake-email", "*/5 * * * *", job_type="email")
    job = _cron(admin, _name(db_url))["wake-email"]
    assert job["schedule"] == "*/5 * * * *" and job["active"] is True
    assert job["command"] == "select \"jobkit\".wake('email')"
    scheduling.set_active(db, settings, "wake-email", False)
    scheduling.add(db, settings, "wake-email", "*/10 * * * *", job_type="email")
    job = _cron(admin, _name(db_url))["wake-email"]
    assert (job["schedule"], job["active"]) == ("*/10 * * * *", False)  # an update keeps it paused
    scheduling.set_active(db, settings, "wake-email", True)
    assert _cron(admin, _name(db_url))["wake-email"]["active"] is True  # resume really reactivates
    [row] = [r for r in scheduling.rows(db, settings) if r.name == "wake-email"]
    assert (row.target, row.origin, row.active) == ("wake email", "cli", True) and row.next_run
    scheduling.remove(db, settings, "wake-email")
    assert "wake-email" not in _cron(admin, _name(db_url))
    with pytest.raises(NotFound, match="no jobkit schedule named wake-email"):
        scheduling.remove(db, settings, "wake-email")
    assert admin.scalar("select count(*) from cron.job where jobid = %s", (user_job,)) == 1


def test_sync_follows_jobkit_toml_and_leaves_operator_schedules(db_url: str, admin: Session) -> None:
    db = Database(db_url)
    declared = Settings(db_url=db_url, maintenance={"sweep-stuck": "* * * * *"},
                        schedules={"nightly": ScheduleConfig("0 3 * * *", sql="select 1")})
    _deploy(db_url, declared)
    scheduling.add(db, declared, "adhoc", "0 * * * *", sql="select 2")
    scheduling.set_active(db, declared, "nightly", False)
    changed = Settings(db_url=db_url, maintenance={"sweep-stuck": "*/2 * * * *"},
                       schedules={"nightly": ScheduleConfig("0 5 * * *", sql="select 1")})
    with pytest.raises(DriftError, match="schedules differ"):
        _deploy(db_url, changed, check=True)
    assert len(_deploy(db_url, changed)) == 2
    jobs = _cron(admin, _name(db_url))
    assert (jobs["nightly"]["schedule"], jobs["nightly"]["active"]) == ("0 5 * * *", False)
    assert jobs["sweep-stuck"]["schedule"] == "*/2 * * * *"
    _deploy(db_url, Settings(db_url=db_url, maintenance={}))
    assert sorted(_cron(admin, _name(db_url))) == ["adhoc"]


def test_hand_edited_cron_job_is_drift(db_url: str, admin: Session) -> None:
    _deploy(db_url)
    admin.execute("select cron.alter_job(jobid, schedule => '0 0 * * *') from cron.job "
                  "where jobname = %s", (f"jobkit:{_name(db_url)}.jobkit:wake",))
    with pytest.raises(DriftError, match="wake"):
        _deploy(db_url, check=True)
    assert _deploy(db_url) == ["~ schedule wake (0 0 * * * -> * * * * *): built-in: wake"]


@pytest.mark.parametrize(("args", "message"), [
    (["--every", "30s"], "'30 seconds' needs pg_cron 1.5 or newer; this server has pg_cron 1.4"),
    (["--cron", "*/30 * * * * *"], "would run it every 30 minutes"),
    (["--cron", "30 seconds"], "needs pg_cron 1.5"),
    (["--cron", "61 * * * *"], "not a valid cron expression"),
    (["--every", "7m"], "does not divide an hour"),
])
def test_invalid_schedules_are_refused_before_reaching_pg_cron(
    db_url: str, admin: Session, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(cli, ["schedule", "add", "x", *args, "--type", "t", "--db-url", db_url])
    assert result.exit_code == 1 and message in result.output, result.output
    assert _cron(admin, _name(db_url)) == {}


def test_cli_round_trip(db_url: str) -> None:
    runner = CliRunner()
    base = ["--db-url", db_url]
    added = runner.invoke(cli, ["schedule", "add", "nightly", "--cron", "0 3 * * *",
                                "--sql", "select jobkit.enqueue('report', '{}')", *base])
    assert added.exit_code == 0 and "scheduled nightly (0 3 * * *)" in added.output
    listed = runner.invoke(cli, ["schedule", "list", "--json", *base])
    assert listed.exit_code == 0 and '"name": "nightly"' in listed.output
    # one time format in every command (issue 26): ISO 8601 in UTC, to the second
    [nightly] = [r for r in json.loads(listed.output) if r["name"] == "nightly"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", nightly["next_run"]), nightly
    assert runner.invoke(cli, ["schedule", "pause", "nightly", *base]).exit_code == 0
    assert runner.invoke(cli, ["schedule", "resume", "nightly", *base]).exit_code == 0
    assert runner.invoke(cli, ["schedule", "remove", "nightly", *base]).exit_code == 0
    missing = runner.invoke(cli, ["schedule", "remove", "nightly", *base])
    assert missing.exit_code == 1 and "no jobkit schedule named nightly" in missing.output
    both = runner.invoke(cli, ["schedule", "add", "x", "--every", "1m", "--cron", "* * * * *",
                               "--type", "t", *base])
    assert both.exit_code == 2


def test_built_in_commands_do_their_work(db_url: str, admin: Session, session: Session) -> None:
    _deploy(db_url)
    jobs = _cron(admin, _name(db_url))
    manager = Lifecycle(session, "jobkit")
    stuck = manager.enqueue(NewJob("t", {}, max_attempts=1))
    manager.claim("t", 1, "w", _minute())
    session.execute("update jobkit.jobs set lease_expires_at = now() - interval '1 s' where id = %s",
                    (stuck,))
    old = manager.enqueue(NewJob("old", {}))
    [job] = manager.claim("old", 1, "w", _minute())
    manager.complete([(old, job.attempts, None)])
    session.execute("update jobkit.jobs set completed_at = now() - interval '30 days' where id = %s",
                    (old,))
    session.execute("insert into jobkit.wakeups (type, transport, outcome, created_at) "
                    "values ('x', 'notify', 'notified', now() - interval '30 days')")

    session.script(str(jobs["sweep-stuck"]["command"]))
    assert manager.get(stuck).status == "failed"  # type: ignore[union-attr]
    session.script(str(jobs["sweep-dead"]["command"]))
    assert manager.get(stuck).status == "dead"  # type: ignore[union-attr]
    session.script(str(jobs["prune"]["command"]))
    assert manager.get(old) is None and manager.get(stuck) is not None
    assert session.scalar("select count(*) from jobkit.wakeups") == 0

    jobid = admin.scalar("select jobid from cron.job where database = %s and jobname like '%%:wake'",
                         (_name(db_url),))
    admin.execute("insert into cron.job_run_details (jobid, runid, database, username, command, status, "
                  "start_time, end_time) values (%s, 900001, 'x', 'postgres', 'c', 'succeeded', "
                  "now() - interval '30 days', now() - interval '30 days'), "
                  "(%s, 900002, 'x', 'postgres', 'c', 'succeeded', now(), now())", (jobid, jobid))
    admin.script(str(jobs["prune-cron-history"]["command"]))
    left = admin.all("select runid from cron.job_run_details where runid in (900001, 900002)")
    assert left == [{"runid": 900002}]
    admin.execute("delete from cron.job_run_details where runid = 900002")


def _minute() -> timedelta:
    return timedelta(minutes=1)
