"""The embedded local PostgreSQL: one real cluster per module (fsync off), started and stopped."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from clusters import running_cluster
from jobkit.exceptions import LocalDbError
from jobkit.ops.localdb import STATE_FILE, LocalCluster, find_pg_bin


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("localdb") / ".jobkit") as local:
        yield local


def test_status_and_url(cluster: LocalCluster) -> None:
    status = cluster.status()
    assert status.running and status.pid and status.port
    assert status.url == f"postgresql://postgres@127.0.0.1:{status.port}/postgres"
    assert cluster.url("app") == f"postgresql://postgres@127.0.0.1:{status.port}/app"
    assert status.version and status.version.split(".")[0].isdigit()
    assert (status.data_dir / "PG_VERSION").is_file()


def test_api_roles(cluster: LocalCluster) -> None:
    with psycopg.connect(cluster.url()) as conn:
        rows = conn.execute(
            "select rolname, rolcanlogin, rolinherit, rolbypassrls from pg_roles"
            " where rolname in ('anon', 'authenticated', 'service_role') order by rolname"
        ).fetchall()
    assert rows == [
        ("anon", False, False, False),
        ("authenticated", False, False, False),
        ("service_role", False, False, True),
    ]


def test_server_settings_and_pg_cron(cluster: LocalCluster) -> None:
    with psycopg.connect(cluster.url()) as conn:
        assert conn.execute("select 1 from pg_extension where extname = 'pg_cron'").fetchone()
        settings: dict[str, str] = dict(
            conn.execute(
                "select name, setting from pg_settings where name in"
                " ('cron.database_name', 'max_connections', 'listen_addresses', 'fsync',"
                " 'log_statement', 'shared_preload_libraries')"
            ).fetchall()
        )
    assert settings == {
        "cron.database_name": "postgres",
        "max_connections": "200",
        "listen_addresses": "127.0.0.1",
        "fsync": "off",
        "log_statement": "none",
        "shared_preload_libraries": "pg_cron",
    }


def test_start_is_idempotent_and_state_is_shared(cluster: LocalCluster) -> None:
    before = cluster.status()
    assert cluster.start() == before.url
    other = LocalCluster(cluster.home)  # a second process finds the same cluster
    assert other.status() == cluster.status() == before
    assert other.start() == before.url


def test_stop_then_restart_keeps_the_port(cluster: LocalCluster) -> None:
    port = cluster.status().port
    cluster.stop()
    cluster.stop()  # idempotent
    status = cluster.status()
    assert not status.running and status.pid is None and status.url is None
    with pytest.raises(LocalDbError) as excinfo:
        cluster.url()
    assert "jobkit db start" in excinfo.value.hint
    assert cluster.start() == f"postgresql://postgres@127.0.0.1:{port}/postgres"
    assert (cluster.home / STATE_FILE).is_file()


def test_missing_bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBKIT_PG_BIN", str(tmp_path))
    with pytest.raises(LocalDbError) as excinfo:
        find_pg_bin()
    assert "postgresql-15" in str(excinfo.value)
    with pytest.raises(LocalDbError):
        LocalCluster(tmp_path / "home").start()


def test_missing_pg_cron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("initdb", "pg_ctl", "postgres", "psql", "pg_config"):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho '{tmp_path}'\n")
        script.chmod(0o755)
    monkeypatch.setenv("JOBKIT_PG_BIN", str(tmp_path))
    with pytest.raises(LocalDbError) as excinfo:
        find_pg_bin()
    assert "postgresql-15-cron" in str(excinfo.value)


def test_not_started_cluster(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path / "never")
    local.stop()
    status = local.status()
    assert not status.running and status.port is None and status.url is None
    with pytest.raises(LocalDbError, match="not running"):
        local.url()
    assert not (tmp_path / "never").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the postgres OS user only matters as root")
def test_root_runs_server_as_postgres(cluster: LocalCluster) -> None:
    owner = cluster.status().data_dir.stat().st_uid
    assert owner != 0
