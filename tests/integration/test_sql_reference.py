"""docs/SQL_API.md is what the catalog of a freshly deployed database says, described by the comments
in sql/schema/ and sql/functions/: regenerate it with `python -m jobkit.schema.reference URL > docs/SQL_API.md`."""

from __future__ import annotations

import re
from pathlib import Path

from jobkit.config import Settings
from jobkit.connector import Session
from jobkit.schema.reference import render_reference, undocumented

DOC = Path(__file__).parents[2] / "docs" / "SQL_API.md"


def test_the_committed_reference_is_what_the_database_has(session: Session) -> None:
    assert DOC.read_text() == render_reference(session, Settings()), (
        "docs/SQL_API.md is stale: python -m jobkit.schema.reference URL > docs/SQL_API.md")


def test_every_public_function_is_described(session: Session) -> None:
    assert undocumented(session, Settings()) == []


def test_the_sql_guide_names_only_functions_that_exist(session: Session) -> None:
    section = (DOC.parent / "guides" / "sql.md").read_text()  # moved from the README (issue 26)
    assert "](../SQL_API.md)" in section
    named = set(re.findall(r"`([a-z_]+)\(", section))
    names = {r["proname"] for r in session.all(
        "select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'jobkit'")}
    assert len(named) >= 10 and named <= names, named - names
