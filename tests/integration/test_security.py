"""anon and authenticated reach nothing; service_role works (acceptance 6)."""

from __future__ import annotations

import pytest
from jobkit.connector import Session
from jobkit.exceptions import PrerequisiteError

API_ROLES = ("anon", "authenticated")


def _objects(session: Session) -> tuple[list[str], list[str]]:
    tables = [r["t"] for r in session.all(
        "select format('%I.%I', schemaname, tablename) as t from pg_tables where schemaname = 'jobkit' "
        "union all select format('%I.%I', schemaname, viewname) from pg_views where schemaname = 'jobkit'")]
    functions = [r["f"] for r in session.all(
        "select p.oid::regprocedure::text as f from pg_proc p "
        "join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'jobkit'")]
    return tables, functions


def test_catalog_denies_api_roles_everything(session: Session) -> None:
    tables, functions = _objects(session)
    assert len(tables) >= 4 and "jobkit.job_history" in tables and len(functions) >= 15
    for role in API_ROLES:
        assert not session.scalar("select has_schema_privilege(%s, 'jobkit', 'USAGE')", (role,))
        for table in tables:
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
                assert not session.scalar("select has_table_privilege(%s, %s, %s)", (role, table, priv))
        for fn in functions:
            assert not session.scalar("select has_function_privilege(%s, %s, 'EXECUTE')", (role, fn))
    rls = session.all("select relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                      "where n.nspname = 'jobkit' and c.relkind = 'r' and not c.relrowsecurity")
    assert rls == []


@pytest.mark.parametrize("role", API_ROLES)
@pytest.mark.parametrize("statement", [
    "select jobkit.enqueue('t', '{}')",
    "select * from jobkit.pick_jobs('t', 1, 'w', interval '1 minute')",
    "select * from jobkit.jobs",
    "select * from jobkit.job_attempts",
    "select * from jobkit.job_history",
    "insert into jobkit.jobs (type, payload) values ('t', '{}')",
    "select jobkit.sweep_dead()",
])
def test_api_roles_are_refused_for_real(session: Session, role: str, statement: str) -> None:
    session.execute("select jobkit.enqueue('t', '{}')")
    session.execute("select set_config('role', %s, false)", (role,))
    try:
        with pytest.raises(PrerequisiteError, match="permission denied"):
            session.execute(statement)
    finally:
        session.execute("reset role")
    assert session.scalar("select count(*) from jobkit.jobs") == 1


def test_service_role_runs_the_lifecycle(session: Session) -> None:
    session.execute("set role service_role")
    try:
        job_id = session.scalar("select jobkit.enqueue('t', '{\"a\": 1}')")
        job = session.one("select id, attempts from jobkit.pick_jobs('t', 1, 'w', interval '1 minute')")
        assert job == {"id": job_id, "attempts": 1}
        assert session.scalar("select jobkit.complete_job(%s, 1, '{\"ok\": true}')", (job_id,)) is True
        assert session.scalar("select count(*) from jobkit.job_history") == 1
        assert session.scalar("select count(*) from jobkit.job_attempts") == 0  # only unfinished tries
    finally:
        session.execute("reset role")


def test_functions_pin_search_path(session: Session) -> None:
    unpinned = session.all(
        "select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = 'jobkit' and not exists "
        "(select 1 from unnest(coalesce(p.proconfig, '{}')) c where c like 'search_path=%%')")
    assert unpinned == []
