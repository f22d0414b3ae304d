"""docs/ARCHITECTURE.md names only what exists: every backticked file, folder, Python name and SQL
name (the rules are in tests/docnames.py), so the page cannot drift from the tree unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest
from docnames import ROOT, Names, missing

DOC = ROOT / "docs" / "ARCHITECTURE.md"


@pytest.fixture(scope="module")
def names() -> Names:
    return Names.read()


def test_every_file_and_name_the_architecture_page_gives_exists(names: Names) -> None:
    assert missing(DOC.read_text(encoding="utf-8"), names) == []


def test_the_check_reports_each_wrong_name_and_why(names: Names) -> None:
    page = "\n".join([
        "Files `toolkit/lifecycle.py`, `sql/queries/*.sql`, `toolkit/nope.py`, `sql/queries/*.nope`.",
        "Python `lifecycle.Statements`, `Registry.run_inline`, `lifecycle.Statementz`, `nomodule.run`.",
        "SQL `jobkit.enqueue()`, `claim_jobs`, `audit_log`, `jobkit.no_such_function`, `no_such_thing`.",
        "Routes `/healthz`, `/nowhere`; history `0001_core`; commands `jobkit deploy --check` are skipped.",
        "| `toolkit/cron/` | `schedules.py`, `timetable.py` |",
        "```",
        "`toolkit/in_a_fenced_block_is_not_read.py`",
        "```",
    ])
    assert missing(page, names) == [
        "`toolkit/nope.py`: no such file or folder",
        "`sql/queries/*.nope`: no such file or folder",
        "`lifecycle.Statementz`: lifecycle defines no Statementz",
        "`nomodule.run`: no toolkit module or class nomodule",
        "`jobkit.no_such_function`: neither in the jobkit package nor an SQL function",
        "`no_such_thing`: not defined in toolkit/ or tests/*.py (Python), nor in sql/, nor an installed module",
        "`/nowhere`: no such HTTP route in toolkit/",
        "`timetable.py`: no such file or folder",
    ]


def test_a_name_removed_from_the_tree_is_reported(tmp_path: Path) -> None:
    (tmp_path / "toolkit").mkdir()
    (tmp_path / "sql").mkdir()
    (tmp_path / "toolkit" / "lifecycle.py").write_text("class Statements:\n    def claim(self) -> None: ...\n")
    (tmp_path / "sql" / "schema.sql").write_text("create or replace function {{ s }}.claim_jobs() returns int\n")
    names = Names.read(tmp_path)
    assert missing("`lifecycle.Statements`, `Statements.claim`, `claim_jobs`", names) == []
    assert missing("`Statements.complete`, `complete_jobs`", names) == [
        "`Statements.complete`: Statements defines no complete",
        "`complete_jobs`: not defined in toolkit/ or tests/*.py (Python), nor in sql/, nor an installed module",
    ]
