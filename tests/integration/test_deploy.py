"""Deploy against the real database: idempotent, queued, atomic, checkable, upgradable (acceptance 7)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from clusters import running_cluster
from jobkit.cli import cli
from jobkit.config import Settings, load_settings
from jobkit.connector import Database, Session
from jobkit.exceptions import DeployError, DriftError, PrerequisiteError
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, DeployReport, deploy
from versions import HEAD, MIGRATIONS

VERSIONS = [m[:4] for m in MIGRATIONS]
FIXTURES = Path(__file__).parents[1] / "fixtures"
QUIET = {"echo": lambda _m: None}


def _deploy(url: str, **options: object) -> DeployReport:
    return deploy(Database(url), Settings(db_url=url), DeployOptions(**options), **QUIET)  # type: ignore[arg-type]


def _history(url: str) -> list[str]:
    with Database(url).session() as s:
        return [r["version"] for r in s.all("select version from jobkit.schema_migrations order by 1")]


def _schema_exists(url: str) -> bool:
    with Database(url).session() as s:
        return bool(s.scalar("select exists (select 1 from pg_namespace where nspname = 'jobkit')"))


def test_first_deploy_applies_and_second_changes_nothing(fresh_db: str) -> None:
    first = _deploy(fresh_db)
    assert first.applied == MIGRATIONS and first.head == HEAD
    second = _deploy(fresh_db)
    assert not second.changed and second.applied == [] and second.head == HEAD
    assert _history(fresh_db) == VERSIONS


def test_two_concurrent_deploys_queue(fresh_db: str) -> None:
    reports: list[DeployReport] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        try:
            reports.append(_deploy(fresh_db))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(len(r.applied) for r in reports) == [0, len(MIGRATIONS)]
    assert _history(fresh_db) == VERSIONS


def test_failed_first_migration_leaves_nothing(fresh_db: str) -> None:
    with pytest.raises(DeployError, match="0000_broken failed and was rolled back: division by zero"):
        _deploy(fresh_db, extra_migrations=[FIXTURES / "broken_first"])
    assert not _schema_exists(fresh_db)


def test_failed_later_migration_leaves_nothing_of_itself(db_url: str) -> None:
    with pytest.raises(DeployError, match="0098_broken"):
        _deploy(db_url, extra_migrations=[FIXTURES / "broken_later"])
    with Database(db_url).session() as s:
        assert s.scalar("select to_regclass('jobkit.half_done')") is None
        assert s.scalar("select count(*) from information_schema.columns "
                        "where table_schema = 'jobkit' and column_name = 'doomed'") == 0
    assert _history(db_url) == VERSIONS


def test_check_reports_behind_and_up_to_date(fresh_db: str) -> None:
    with pytest.raises(DriftError, match=f"{len(MIGRATIONS)} pending migration") as info:
        _deploy(fresh_db, check=True)
    assert info.value.exit_code == 3
    _deploy(fresh_db)
    assert _deploy(fresh_db, check=True).head == HEAD
    with pytest.raises(DriftError, match="0099_fixture_upgrade"):
        _deploy(fresh_db, check=True, extra_migrations=[FIXTURES / "migrations"])


def test_changed_checksum_is_drift(db_url: str) -> None:
    _deploy(db_url, extra_migrations=[FIXTURES / "migrations"])
    with Database(db_url).session() as s:
        s.execute("update jobkit.schema_migrations set checksum = repeat('0', 64) where version = '0099'")
    with pytest.raises(DriftError, match="checksum"):
        _deploy(db_url, check=True, extra_migrations=[FIXTURES / "migrations"])
    with pytest.raises(DriftError, match="different checksum"):
        _deploy(db_url, extra_migrations=[FIXTURES / "migrations"])


def test_a_recut_migrations_old_checksum_is_recorded_anew(db_url: str) -> None:
    """0001..0013 lost their functions in issue 22: their pre-recut checksums are drift for
    `--check`, and a plain deploy records the new ones."""
    with Database(db_url).session() as s:
        s.execute("update jobkit.schema_migrations set checksum = repeat('0', 64) where version <= '0013'")
    with pytest.raises(DriftError, match="recut"):
        _deploy(db_url, check=True)
    _deploy(db_url)
    _deploy(db_url, check=True)


def test_unknown_newer_migration_is_refused(db_url: str) -> None:
    _deploy(db_url, extra_migrations=[FIXTURES / "migrations"])
    with pytest.raises(DeployError, match="does not know"):
        _deploy(db_url)


def test_upgrade_in_place_keeps_every_job(db_url: str) -> None:
    with Database(db_url).session() as s:
        manager = Lifecycle(s, "jobkit")
        ids = manager.enqueue_many([NewJob("t", {"i": i}) for i in range(100)])
        from datetime import timedelta

        claimed = manager.claim("t", 10, "w", timedelta(minutes=5))
        before = s.all("select id, status, attempts, payload from jobkit.jobs order by id")
    report = _deploy(db_url, extra_migrations=[FIXTURES / "migrations"])
    assert report.applied == ["0099_fixture_upgrade"]
    with Database(db_url).session() as s:
        after = s.all("select id, status, attempts, payload from jobkit.jobs order by id")
        assert after == before and len(after) == len(ids)
        assert s.scalar("select count(*) from jobkit.jobs where tenant = 'default'") == 100
        manager = Lifecycle(s, "jobkit")
        assert manager.complete([(j.id, j.attempts, None) for j in claimed]) == {j.id for j in claimed}
    assert _history(db_url) == [*VERSIONS, "0099"]


def test_type_settings_sync_and_drift(db_url: str, sample_config: Path) -> None:
    settings = load_settings(sample_config, db_url=db_url)
    report = deploy(Database(db_url), settings, **QUIET)
    assert report.types_changed == ["email"]
    assert not deploy(Database(db_url), settings, **QUIET).changed
    with Database(db_url).session() as s:
        row = s.one("select max_attempts, extract(epoch from lease) as lease from jobkit.job_types "
                    "where type = 'email'")
        assert row == {"max_attempts": 5, "lease": 120}
    with pytest.raises(DriftError, match="job type settings differ from jobkit.toml: email"):
        _deploy(db_url, check=True)
    assert _deploy(db_url).types_changed == ["email"]
    with Database(db_url).session() as s:
        assert s.scalar("select count(*) from jobkit.job_types where type = 'email'") == 0


def test_role_without_create_privilege_gets_a_clear_error(fresh_db: str, admin: Session) -> None:
    admin.execute("drop role if exists jobkit_weak")
    admin.execute("create role jobkit_weak login")
    weak = fresh_db.replace("postgres@", "jobkit_weak@")
    try:
        with pytest.raises(PrerequisiteError, match="cannot create schemas") as info:
            _deploy(weak)
        assert "GRANT CREATE" in info.value.hint
        assert not _schema_exists(fresh_db)
    finally:
        admin.execute("drop role jobkit_weak")


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A PostgreSQL with pg_cron installed but not preloaded, and no Supabase roles."""
    yield from _extra_cluster(tmp_path_factory, preload_cron=False, api_roles=False)


@pytest.fixture(scope="module")
def no_roles_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """pg_cron preloaded, but none of Supabase's API roles (self-hosted PostgreSQL)."""
    yield from _extra_cluster(tmp_path_factory, preload_cron=True, api_roles=False)


@pytest.mark.slow
def test_pg_cron_not_preloaded_is_refused_with_the_fix(plain_cluster: LocalCluster) -> None:
    url = plain_cluster.url()
    with pytest.raises(PrerequisiteError, match="not loaded") as info:
        _deploy(url)
    assert "shared_preload_libraries" in info.value.hint and "Cron integration" in info.value.hint
    assert not _schema_exists(url)
    result = CliRunner().invoke(cli, ["deploy", "--db-url", url])
    assert result.exit_code == 1 and result.output.startswith("error: pg_cron is installed but not loaded")


@pytest.mark.slow
def test_plain_postgres_deploys_and_reports_skipped_grants(no_roles_cluster: LocalCluster) -> None:
    report = _deploy(no_roles_cluster.url())
    assert report.applied == MIGRATIONS
    skipped = " ".join(report.notices)
    assert "role anon does not exist" in skipped and "service_role does not exist" in skipped
    with Database(no_roles_cluster.url()).session() as s:
        assert s.scalar("select has_function_privilege('public', 'jobkit.enqueue(text,jsonb,int,"
                        "timestamptz,int,text,jsonb,text,interval,interval)', 'EXECUTE')") is False
        assert s.scalar("select jobkit.enqueue('t', '{}') is not null") is True


def _extra_cluster(factory: pytest.TempPathFactory, **flags: bool) -> Iterator[LocalCluster]:
    with running_cluster(factory.mktemp("extra"), **flags) as local:
        yield local


def test_a_second_deploy_queues_for_the_lock_and_gives_up_after_lock_wait(db_url: str) -> None:
    """Deploys serialise on an advisory lock: one that finds it held tries again (every 50-500 ms,
    holding no snapshot), proceeds once it is released, and gives up with a hint after --lock-wait."""
    key = "jobkit:deploy:jobkit"
    holder = psycopg.connect(db_url, autocommit=True)
    try:
        holder.execute("select pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        with pytest.raises(DeployError, match="held the deploy lock"):
            _deploy(db_url, lock_wait=timedelta(seconds=1), schedules=False)
        said: list[str] = []
        waiting = threading.Event()

        def echo(message: str) -> None:
            said.append(message)
            if message.startswith("waiting for another jobkit deploy"):
                waiting.set()

        done: list[DeployReport] = []
        second = threading.Thread(target=lambda: done.append(deploy(
            Database(db_url), Settings(db_url=db_url), DeployOptions(schedules=False), echo=echo)))
        second.start()
        assert waiting.wait(10)
        holder.execute("select pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
        second.join(30)
        assert done and done[0].head is not None
    finally:
        holder.close()
