"""`jobkit doctor` passes on a healthy database and names the right failure and fix on broken ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from clusters import running_cluster
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.ops.doctor import FAIL, PASS, WARN, Check, run
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from standins import PgNetStandIn, install_vault
from standins.http_server import Server


def _checks(url: str, **kwargs: bool) -> dict[str, Check]:
    return {c.name: c for c in run(Database(url), Settings(db_url=url), **kwargs)}


@pytest.fixture
def healthy(db_url: str) -> str:
    deploy(Database(db_url), Settings(db_url=db_url), DeployOptions(), echo=lambda _m: None)
    return db_url


def test_healthy_database_passes(healthy: str) -> None:
    checks = _checks(healthy)
    assert {c.status for c in checks.values()} <= {PASS, WARN}
    assert checks["pg_cron"].status == PASS and "minute schedules only" in checks["pg_cron"].detail
    assert checks["schema"].status == PASS and checks["grants"].status == PASS
    assert checks["wake transport"].detail.startswith("NOTIFY")
    result = CliRunner().invoke(cli, ["doctor", "--db-url", healthy])
    assert result.exit_code == 0, result.output


def test_grant_to_anon_added_by_hand(healthy: str, session: Session) -> None:
    session.execute("grant select on jobkit.jobs to anon")
    check = _checks(healthy)["grants"]
    assert check.status == FAIL and "anon has privileges on table jobkit.jobs" in check.detail
    assert check.fix.startswith("revoke all on table jobkit.jobs from anon")
    result = CliRunner().invoke(cli, ["doctor", "--db-url", healthy])
    assert result.exit_code == 3 and "grants" in result.output


def test_grant_on_the_history_view_is_caught(healthy: str, session: Session) -> None:
    session.execute("grant select on jobkit.job_history to authenticated")
    check = _checks(healthy)["grants"]
    assert check.status == FAIL and "authenticated has privileges on table jobkit.job_history" in check.detail
    assert check.fix.startswith("revoke all on table jobkit.job_history from authenticated")


def test_schema_behind(healthy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A jobkit newer than the database: one packaged migration the database has not applied."""
    from jobkit.ops import doctor
    from jobkit.schema.render import Migration

    packaged = doctor.render_migrations
    monkeypatch.setattr(doctor, "render_migrations",
                        lambda s: [*packaged(s), Migration("0099", "newer", "select 1;")])
    check = _checks(healthy)["schema"]
    assert check.status == FAIL and "behind: 1 pending migration" in check.detail and check.fix == "jobkit deploy"


def test_rls_switched_off(healthy: str, session: Session) -> None:
    session.execute("alter table jobkit.job_attempts disable row level security")
    check = _checks(healthy)["row level security"]
    assert check.status == FAIL and "job_attempts" in check.detail and "enable row level security" in check.fix


def test_not_deployed(fresh_db: str) -> None:
    checks = _checks(fresh_db)
    assert checks["schema"].status == FAIL and checks["schema"].fix == "jobkit deploy"
    assert "grants" not in checks  # nothing to check before the schema exists


def test_pg_net_without_secrets_and_a_stopped_pg_net_worker(healthy: str) -> None:
    PgNetStandIn(healthy).install()
    with PgNetStandIn(healthy):
        deploy(Database(healthy), Settings(db_url=healthy), DeployOptions(), echo=lambda _m: None)
        checks = _checks(healthy)
        assert checks["pg_net"].status == PASS and "pg_net worker" not in checks  # it runs
        assert checks["secrets"].status == FAIL and "jobkit secrets set" in checks["secrets"].fix
    stopped = _checks(healthy)
    assert stopped["pg_net worker"].status == FAIL and "net.worker_restart()" in stopped["pg_net worker"].fix


@pytest.mark.parametrize("vault", [True, False], ids=["vault", "table"])
def test_doctor_passes_after_secrets_set(healthy: str, server: Server, vault: bool) -> None:
    """Issue 21 Found 8: after `jobkit secrets set`, doctor finds the signing secret where it is
    stored (Vault's jobkit_worker_secret with the Vault stand-in, else jobkit.secrets) and passes."""
    if vault:
        install_vault(healthy)
    PgNetStandIn(healthy).install()
    runner = CliRunner()
    with PgNetStandIn(healthy):
        deploy(Database(healthy), Settings(db_url=healthy), DeployOptions(), echo=lambda _m: None)
        assert _checks(healthy)["secrets"].status == FAIL  # nothing stored yet: the check can fail
        stored = runner.invoke(cli, ["secrets", "set", "--url", server.base + "/ok", "--db-url", healthy])
        assert stored.exit_code == 0, stored.output
        check = _checks(healthy)["secrets"]
        store = "in Vault" if vault else "in jobkit.secrets"
        assert check.status == PASS and check.detail == f"worker URL and signing secret set {store}" + (
            "" if vault else " (no Vault)"), check
        result = runner.invoke(cli, ["doctor", "--db-url", healthy])
        assert result.exit_code == 0, result.output


def test_paused_schedule_warns(healthy: str) -> None:
    from jobkit.cron import schedules as scheduling

    scheduling.set_active(Database(healthy), Settings(db_url=healthy), "prune", False)
    check = _checks(healthy)["schedules"]
    assert check.status == WARN and "prune" in check.detail and check.fix == "jobkit schedule resume prune"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("plain"), preload_cron=False) as local:
        yield local


@pytest.mark.slow
def test_pg_cron_not_preloaded(plain: LocalCluster) -> None:
    check = _checks(plain.url())["pg_cron"]
    assert check.status == FAIL and "not preloaded" in check.detail
    assert "shared_preload_libraries" in check.fix


def test_unreachable_server() -> None:
    checks = run(Database("postgresql://postgres@127.0.0.1:1/x"), Settings())
    assert [(c.name, c.status) for c in checks] == [("connection", FAIL)]
