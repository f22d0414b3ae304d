"""sql/functions/ re-applied by every deploy (issue 22, item 1): what the files say is what the
database gets, whatever was done to it by hand or by an older jobkit, and nothing else is touched."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.exceptions import DriftError
from jobkit.schema.deploy import DeployOptions, deploy


def _deploy(url: str, **options: object) -> list[str]:
    report = deploy(Database(url), Settings(db_url=url), DeployOptions(schedules=False, **options),  # type: ignore[arg-type]
                    echo=lambda _m: None)
    return report.functions_changed


def _one(url: str, sql: str, *params: object) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params or None).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None


def _run(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)  # type: ignore[arg-type]


def test_a_second_deploy_changes_nothing(fresh_db: str) -> None:
    assert _deploy(fresh_db)[0].endswith("added")  # the first deploy adds every function (too many to name)
    assert _deploy(fresh_db) == []


def test_hand_edits_are_drift_and_the_next_deploy_undoes_them(fresh_db: str) -> None:
    """A function edited by hand, a trigger dropped, one disabled, a function added: `deploy
    --check` names each one; `deploy` restores the files' versions and drops the stray function."""
    _deploy(fresh_db)
    original = _one(fresh_db, "select pg_get_functiondef('jobkit.wake_all()'::regprocedure)")
    _run(fresh_db,
         "create or replace function jobkit.wake_all() returns int language sql as 'select 42'",
         "drop trigger jobs_wake_on_insert on jobkit.jobs",
         "alter table jobkit.job_types disable trigger job_types_key_backfill",
         "create function jobkit.by_hand() returns int language sql as 'select 1'")
    with pytest.raises(DriftError) as drift:
        _deploy(fresh_db, check=True)
    message = drift.value.message
    for part in ("changed: function jobkit.wake_all()", "trigger jobs_wake_on_insert on jobkit.jobs",
                 "trigger job_types_key_backfill on jobkit.job_types", "dropped: function jobkit.by_hand()"):
        assert part in message, message
    assert _one(fresh_db, "select jobkit.wake_all()") == 42  # --check changed nothing
    _deploy(fresh_db)
    assert _one(fresh_db, "select pg_get_functiondef('jobkit.wake_all()'::regprocedure)") == original
    assert _one(fresh_db, "select to_regprocedure('jobkit.by_hand()')") is None
    assert _one(fresh_db, "select tgenabled from pg_trigger where tgname = 'job_types_key_backfill'") == "O"
    assert _one(fresh_db, "select count(*) from pg_trigger where tgname = 'jobs_wake_on_insert'") == 1
    assert _deploy(fresh_db, check=True) == []


def test_a_changed_signature_replaces_the_old_function_and_keeps_its_grants(fresh_db: str) -> None:
    """An older jobkit's function with another return type and another parameter name (what
    `create or replace` refuses) is dropped and created anew, in the deploy's transaction, and the
    roles of the user's own keep their EXECUTE privilege; an old overload the files no longer
    define is dropped."""
    _deploy(fresh_db)
    _run(fresh_db,
         "do $$ begin if not exists (select from pg_roles where rolname = 'app_ops') then "
         "create role app_ops; end if; end $$",
         "drop function jobkit.sweep_dead()",
         "create function jobkit.sweep_dead() returns int language sql as 'select 0'",
         "drop function jobkit.due_count(text, int)",
         "create function jobkit.due_count(p_kind text, p_cap int default 10) returns int "
         "language sql as 'select 0'",
         "create function jobkit.due_count(p_kind text) returns int language sql as 'select 0'",
         "grant execute on function jobkit.sweep_dead() to app_ops")
    _deploy(fresh_db)
    result = _one(fresh_db, "select pg_get_function_result('jobkit.sweep_dead()'::regprocedure)")
    assert result == "bigint"
    assert _one(fresh_db, "select has_function_privilege('app_ops', 'jobkit.sweep_dead()', 'execute')")
    assert _one(fresh_db, "select pg_get_function_identity_arguments('jobkit.due_count(text, int)'::regprocedure)") \
        == "p_type text, p_cap integer"
    assert _one(fresh_db, "select to_regprocedure('jobkit.due_count(text)')") is None
    _run(fresh_db, "revoke all on function jobkit.sweep_dead() from app_ops")


def test_a_view_whose_columns_changed_is_created_anew(fresh_db: str) -> None:
    _deploy(fresh_db)
    _run(fresh_db, "drop view jobkit.job_history",
         "create view jobkit.job_history as select 1 as only_column")
    _deploy(fresh_db)
    assert _one(fresh_db, "select count(*) from information_schema.columns "
                          "where table_schema = 'jobkit' and table_name = 'job_history'") > 1


def test_a_deploy_does_not_wait_for_writers_when_its_triggers_are_unchanged(fresh_db: str) -> None:
    """CREATE TRIGGER would queue behind every open transaction that wrote to jobs (and every
    enqueue behind it): an unchanged trigger is left alone, so a deploy with a short lock timeout
    succeeds while an enqueue's transaction stays open."""
    _deploy(fresh_db)
    oid = _one(fresh_db, "select oid from pg_trigger where tgname = 'jobs_wake_on_insert'")
    with psycopg.connect(fresh_db) as writer:
        writer.execute("select jobkit.enqueue('t', '{}'::jsonb)")  # open: holds ROW EXCLUSIVE on jobs
        done = threading.Event()

        def redeploy() -> None:
            _deploy(fresh_db, lock_timeout=timedelta(seconds=2))
            done.set()

        thread = threading.Thread(target=redeploy)
        thread.start()
        thread.join(timeout=60)
        assert done.is_set()
        writer.rollback()
    assert _one(fresh_db, "select oid from pg_trigger where tgname = 'jobs_wake_on_insert'") == oid
