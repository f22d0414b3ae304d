"""Fixtures of the fault suite; the helpers and the method are in faultkit.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clusters import running_cluster
from faultkit import APP, HERE
from jobkit.ops.localdb import LocalCluster
from psycopg import sql as psql
from workers import Worker


@pytest.fixture(scope="session")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A durable cluster of the fault suite's own, apart from the session's shared one (whose
    long-lived sessions a restart would break); the fault tests run one at a time and each uses
    a fresh database on it, so one started cluster serves every module of the suite."""
    with running_cluster(tmp_path_factory.mktemp("faults"), durable=True) as local:
        yield local


@pytest.fixture
def fault_url(restartable: LocalCluster) -> Iterator[str]:
    """A fresh database on the module's restartable cluster."""
    name = f"f_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(restartable.url(), autocommit=True) as conn:
        conn.execute(psql.SQL("create database {}").format(psql.Identifier(name)))
    try:
        yield restartable.url(name)
    finally:
        with psycopg.connect(restartable.url(), autocommit=True) as conn:
            conn.execute("select cron.unschedule(jobid) from cron.job where database = %s", (name,))
            conn.execute(psql.SQL("drop database if exists {} with (force)").format(psql.Identifier(name)))


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start fault workers (cwd tests/faults); every one still running is killed at the end, and
    each one's output is kept in the test's tmp_path (worker-<pid>.log)."""
    started: list[Worker] = []

    def start(url: str, *args: str, **options: Any) -> Worker:
        started.append(Worker(url, *args, app=APP, cwd=HERE, **options))
        return started[-1]

    yield start
    for w in started:
        if w.alive:
            w.proc.kill()
        out, _ = w.proc.communicate(timeout=10)
        (tmp_path / f"worker-{w.proc.pid}.log").write_text(out or "")
