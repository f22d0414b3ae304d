"""Deploys that never stall a live queue (issue 22 item 2), against the real database: a short
lock_timeout with retries, and a migration's outside-transaction section (index built CONCURRENTLY,
batched backfill) run after its transaction and finished by the next deploy after a failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.exceptions import DeployError, DriftError
from jobkit.schema.deploy import DeployOptions, DeployReport, deploy
from jobkit.schema.migrations import apply
from jobkit.schema.render import render_migrations, render_script
from poll import wait_for
from versions import MIGRATIONS

FIXTURES = Path(__file__).parents[1] / "fixtures"
LOCK, OUTSIDE = FIXTURES / "live_lock", FIXTURES / "live_outside"
VERSIONS = [m[:4] for m in MIGRATIONS]
FAST = {"lock_timeout": timedelta(milliseconds=200), "lock_backoff": timedelta(milliseconds=100)}


def _deploy(url: str, echo: list[str] | None = None, **options: object) -> DeployReport:
    lines = echo if echo is not None else []
    return deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False, **options),  # type: ignore[arg-type]
                  echo=lines.append)


@contextmanager
def holding(url: str, sql: str, seconds: float) -> Iterator[None]:
    """Another session runs ``sql`` in a transaction and keeps it open for ``seconds``."""
    conn = psycopg.connect(url)
    conn.execute(sql)  # type: ignore[arg-type]
    timer = threading.Timer(seconds, conn.rollback)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        conn.rollback()
        conn.close()


def _scalar(url: str, sql: str) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None


def _history(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("select version from jobkit.schema_migrations order by 1")]


def _has_tenant(url: str) -> bool:
    return bool(_scalar(url, "select exists (select 1 from information_schema.columns where "
                             "table_schema = 'jobkit' and table_name = 'jobs' and column_name = 'tenant')"))


def _add_jobs(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("insert into jobkit.jobs (type, payload) select 'live.t', jsonb_build_object('n', g) "
                     "from generate_series(1, %s) g", (n,))


def _index_valid(url: str, name: str) -> object:
    return _scalar(url, "select i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid "
                        f"where c.relname = '{name}'")


def test_a_lock_held_less_than_the_retry_budget_is_waited_out(db_url: str) -> None:
    """The migration times out on the held lock, rolls back, tries again, and is applied once the
    other session lets go; the echo says which attempt failed."""
    echo: list[str] = []
    with holding(db_url, "lock table jobkit.jobs in access share mode", seconds=1.0):
        report = _deploy(db_url, echo, extra_migrations=[LOCK], lock_attempts=8, **FAST)
    assert report.applied == ["0099_live_lock"]
    assert _has_tenant(db_url) and _history(db_url) == [*VERSIONS, "0099"]
    retries = [line for line in echo if "0099_live_lock: a lock was not granted within 200ms" in line]
    assert retries and "(attempt 1 of 8)" in retries[0]


def test_a_lock_held_past_the_budget_fails_in_one_line_with_nothing_applied(db_url: str) -> None:
    with holding(db_url, "lock table jobkit.jobs in access share mode", seconds=30), \
            pytest.raises(DeployError) as info:
        _deploy(db_url, extra_migrations=[LOCK], lock_attempts=2, **FAST)
    error = info.value
    assert "0099_live_lock failed and was rolled back" in error.message and "lock timeout" in error.message
    assert "\n" not in error.message and "2 attempt(s) of 200ms" in error.hint and "--lock-attempts" in error.hint
    assert not _has_tenant(db_url) and _history(db_url) == VERSIONS


def test_the_outside_section_runs_after_the_transaction_in_batches(db_url: str) -> None:
    _add_jobs(db_url, 2500)
    report = _deploy(db_url, extra_migrations=[OUTSIDE], backfill_batch=1000)
    assert report.applied == ["0099_live_outside"]
    assert _index_valid(db_url, "jobs_tenant_idx") is True
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is distinct from 'default'") == 0
    # three batches, each its own transaction: the rows carry three different xmins
    assert _scalar(db_url, "select count(distinct xmin::text) from jobkit.jobs") == 3
    again = _deploy(db_url, extra_migrations=[OUTSIDE])
    assert not again.applied and _scalar(db_url, "select count(distinct xmin::text) from jobkit.jobs") == 3


def test_a_deploy_killed_between_the_phases_is_finished_by_the_next(db_url: str) -> None:
    """The state a kill after the migration's commit leaves (history row, column, no index, no
    backfill): the next deploy runs the outside section of the head migration again."""
    _add_jobs(db_url, 1200)
    settings = Settings(db_url=db_url)
    migration = render_migrations(settings, [OUTSIDE])[-1]
    with Database(db_url).session() as s:
        apply(s, settings, migration, lock_timeout=timedelta(seconds=2))
    assert _history(db_url)[-1] == "0099" and _index_valid(db_url, "jobs_tenant_idx") is None
    with pytest.raises(DriftError) as drift:  # --check tells, and changes nothing
        _deploy(db_url, extra_migrations=[OUTSIDE], check=True)
    assert "0099_live_outside: index jobs_tenant_idx not built" in drift.value.message
    assert "0099_live_outside: update" in drift.value.message and "has rows left" in drift.value.message
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is null") == 1200
    report = _deploy(db_url, extra_migrations=[OUTSIDE])
    assert not report.applied
    _deploy(db_url, extra_migrations=[OUTSIDE], check=True)  # nothing left: no drift
    assert _index_valid(db_url, "jobs_tenant_idx") is True
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is null") == 0


KILLABLE = """
import sys
from datetime import timedelta
from pathlib import Path
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.schema.deploy import DeployOptions, deploy
url, folder = sys.argv[1], Path(sys.argv[2])
deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False, extra_migrations=[folder],
       backfill_batch=50), echo=lambda _m: None)
"""


def test_a_deploy_process_killed_mid_backfill_is_finished_by_the_next(db_url: str) -> None:
    """SIGKILL a real deploy once its migration is committed and its backfill is part done (in
    batches of 50); the next deploy finishes the backfill and leaves the index valid."""
    _add_jobs(db_url, 20000)
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, db_url, str(OUTSIDE)])
    try:
        wait_for(lambda: _scalar(db_url, "select count(*) from jobkit.jobs where tenant = 'default'")
                 if _has_tenant(db_url) else 0, timeout=60, what="the backfill to start")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and _history(db_url)[-1] == "0099"
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is null") != 0
    _deploy(db_url, extra_migrations=[OUTSIDE])
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is null") == 0
    assert _index_valid(db_url, "jobs_tenant_idx") is True


def test_an_invalid_leftover_index_is_dropped_and_built_again(db_url: str) -> None:
    """CREATE INDEX CONCURRENTLY, once its catalog entry is committed, waits for every transaction
    that may write the table; a writer held past the lock budget makes it fail and leave an INVALID
    index. The deploy fails naming the fix (the migration is committed); the next one drops the
    leftover and builds it valid."""
    _add_jobs(db_url, 500)
    settings = Settings(db_url=db_url)
    with Database(db_url).session() as s:  # the migration proper, committed (the writer below would block it)
        apply(s, settings, render_migrations(settings, [OUTSIDE])[-1], lock_timeout=timedelta(seconds=2))
    with holding(db_url, "lock table jobkit.jobs in row exclusive mode", seconds=30), \
            pytest.raises(DeployError) as info:
        _deploy(db_url, extra_migrations=[OUTSIDE], lock_attempts=1, **FAST)
    assert "index jobs_tenant_idx failed outside the migration's transaction" in info.value.message
    assert "jobkit deploy` runs its outside-transaction statements again" in info.value.hint
    assert _history(db_url)[-1] == "0099" and _index_valid(db_url, "jobs_tenant_idx") is False
    old = _scalar(db_url, "select 'jobkit.jobs_tenant_idx'::regclass::oid")
    with pytest.raises(DriftError, match="0099_live_outside: index jobs_tenant_idx INVALID"):
        _deploy(db_url, extra_migrations=[OUTSIDE], check=True)
    _deploy(db_url, extra_migrations=[OUTSIDE])
    assert _index_valid(db_url, "jobs_tenant_idx") is True
    assert _scalar(db_url, "select 'jobkit.jobs_tenant_idx'::regclass::oid") != old
    assert _scalar(db_url, "select count(*) from jobkit.jobs where tenant is null") == 0


def test_check_reports_a_constraint_an_interrupted_deploy_left_unvalidated(db_url: str) -> None:
    """Migrations add constraints NOT VALID and deploy validates them afterwards; one left NOT VALID
    (a deploy killed in between) is drift for --check until the next deploy validates it."""
    _deploy(db_url, check=True)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("alter table jobkit.jobs add constraint jobs_live_check check (priority > -100000) not valid")
    with pytest.raises(DriftError, match="constraint jobs_live_check on jobs not validated yet"):
        _deploy(db_url, check=True)
    _deploy(db_url)
    assert _scalar(db_url, "select convalidated from pg_constraint where conname = 'jobs_live_check'") is True
    _deploy(db_url, check=True)


def test_a_fresh_install_script_runs_the_outside_section_inside_its_transaction(fresh_db: str) -> None:
    """`jobkit render` and the Supabase files are one transaction: there the section takes its
    in-transaction form (CREATE INDEX CONCURRENTLY would be refused inside one)."""
    settings = Settings(db_url=fresh_db)
    script = render_script(settings, render_migrations(settings, [OUTSIDE]))
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(script.encode())
    assert _index_valid(fresh_db, "jobs_tenant_idx") is True and _has_tenant(fresh_db)
    assert _history(fresh_db) == [*VERSIONS, "0099"]



def test_dry_run_shows_the_outside_section_and_changes_nothing(db_url: str) -> None:
    report = _deploy(db_url, extra_migrations=[OUTSIDE], dry_run=True)
    assert report.pending == ["0099_live_outside"]
    after = report.sql.split("outside any transaction", 1)[1]
    assert "create index concurrently if not exists jobs_tenant_idx" in after and "%(batch)s" in after
    assert not _has_tenant(db_url) and _history(db_url) == VERSIONS
