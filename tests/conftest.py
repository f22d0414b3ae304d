"""Shared fixtures: one real PostgreSQL 15 + pg_cron cluster per test session (started by jobkit's
own LocalCluster), a template database with jobkit deployed, and a fresh database per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import crontick
import pytest
import wheelbuild
from clusters import running_cluster
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from standins.http_server import Server, recording_server

TEMPLATE = "jobkit_template"
SCHEMA = "jobkit"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds a venv or starts extra clusters (-m 'not slow' skips)")
    # COLUMNS/LINES: the CLI's tables are as wide as $COLUMNS says (pytest-xdist's workers get 80)
    for var in ("JOBKIT_DB_URL", "SUPABASE_DB_URL", "DATABASE_URL", "JOBKIT_CONFIG", "JOBKIT_HOME", "COLUMNS", "LINES"):
        os.environ.pop(var, None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the packaging tests' venv now when they are to run, so that the build (minutes,
    mostly waiting on the package registry) overlaps the tests before them (tests/wheelbuild.py)."""
    if session.config.option.collectonly:
        return
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":  # one background build per run: the first
        return  # worker's (a packaging test that lands on another worker builds when it starts)
    if any(item.path.name == "test_packaging.py" for item in session.items):
        wheelbuild.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    wheelbuild.finish()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as local:
        yield local


@pytest.fixture(scope="session")
def admin(cluster: LocalCluster) -> Iterator[Session]:
    """A superuser session on the cluster's postgres database."""
    with Database(cluster.url("postgres")).session() as session:
        yield session


@pytest.fixture(scope="session")
def template_db(cluster: LocalCluster, admin: Session) -> str:
    admin.execute_with_identifiers("drop database if exists {name}", name=TEMPLATE)
    admin.execute_with_identifiers("create database {name}", name=TEMPLATE)
    url = cluster.url(TEMPLATE)
    deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False), echo=lambda _m: None)
    return TEMPLATE


@pytest.fixture(scope="session")
def cron_tick(cluster: LocalCluster, template_db: str) -> Iterator[crontick.Background]:
    """The real pg_cron tick scenario of test_cron_tick.py, playing in a process of its own."""
    background = crontick.Background(cluster, template_db)
    yield background
    background.stop()


@pytest.fixture(scope="session", autouse=True)
def _cron_tick_early(request: pytest.FixtureRequest) -> None:
    """Start the pg_cron tick scenario with the session's first test when test_cron_tick.py is to run:
    waiting for pg_cron's next minute then overlaps the tests before it (tests/crontick.py)."""
    if any(item.path.name == "test_cron_tick.py" for item in request.session.items):
        request.getfixturevalue("cron_tick")


@pytest.fixture
def fresh_db(cluster: LocalCluster, admin: Session) -> Iterator[str]:
    """An empty database (no jobkit); yields its URL."""
    yield from _database(cluster, admin, template=None)


@pytest.fixture
def other_fresh_db(cluster: LocalCluster, admin: Session) -> Iterator[str]:
    """A second empty database, for tests that compare two."""
    yield from _database(cluster, admin, template=None)


@pytest.fixture
def db_url(cluster: LocalCluster, admin: Session, template_db: str) -> Iterator[str]:
    """A fresh database with jobkit deployed; yields its URL."""
    yield from _database(cluster, admin, template=template_db)


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(db_url=db_url)


@pytest.fixture
def db(db_url: str) -> Database:
    return Database(db_url)


@pytest.fixture
def session(db: Database) -> Iterator[Session]:
    with db.session() as s:
        yield s


@pytest.fixture
def manager(session: Session) -> Lifecycle:
    return Lifecycle(session, SCHEMA)


@pytest.fixture
def server() -> Iterator[Server]:
    """A recording HTTP server on 127.0.0.1 (/ok 200, /fail 500, /slow 1 s, /redirect 302)."""
    with recording_server() as state:
        yield state


@pytest.fixture
def sample_config(tmp_path: Path) -> Path:
    path = tmp_path / "jobkit.toml"
    path.write_text(
        'schema = "jobkit"\n\n[defaults]\nmax_attempts = 3\n\n'
        '[types.email]\nmax_attempts = 5\nlease = "2m"\nbackoff = { base = "10s", factor = 2 }\n'
    )
    return path


def _database(cluster: LocalCluster, admin: Session, template: str | None) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    if template:
        # file_copy: copying the template's files (after a checkpoint) takes half the time of
        # PostgreSQL 15's default WAL-logged copy for a database this small
        admin.execute_with_identifiers("create database {name} template {tpl} strategy file_copy",
                                       name=name, tpl=template)
    else:
        admin.execute_with_identifiers("create database {name} strategy file_copy", name=name)
    try:
        yield cluster.url(name)
    finally:
        admin.execute("select cron.unschedule(jobid) from cron.job where database = %s", (name,))
        admin.execute_with_identifiers("drop database if exists {name} with (force)", name=name)
