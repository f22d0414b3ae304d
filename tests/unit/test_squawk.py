"""squawk (the PostgreSQL migration linter) on every rendered migration.

New migrations must be clean, or carry `-- squawk-ignore <rule>` (with the reason beside it) on the
line before the statement. The frozen migrations 0001-0012 cannot take a comment (their checksums
are recorded in deployed databases), so their accepted findings are listed, with reasons, in
squawk/frozen.toml; any other finding in them fails. squawk comes from the dev extra (squawk-cli).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from jobkit.config import Settings
from jobkit.schema import outside
from jobkit.schema.render import render_migrations

HERE = Path(__file__).parent / "squawk"
CONFIG = HERE / "squawk.toml"
CONFIG_OUTSIDE = HERE / "squawk_outside.toml"  # the statements deploy runs outside any transaction
FROZEN = HERE / "frozen.toml"
LAST_FROZEN = "0012"

Findings = Counter[tuple[str, str]]  # (file stem's version, rule) -> hits


def squawk_binary() -> str:
    beside = Path(sys.executable).parent / "squawk"
    found = str(beside) if beside.is_file() else shutil.which("squawk")
    if found is None:
        pytest.fail("squawk not found: install the dev extra (`pip install -e '.[dev]'`, squawk-cli)")
    return found


def lint(files: list[Path], config: Path = CONFIG) -> list[dict[str, object]]:
    """squawk's findings (its JSON report) for these SQL files."""
    run = subprocess.run([squawk_binary(), "-c", str(config), "--reporter", "json", *map(str, files)],
                         capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(run.stdout or "[]")
    except json.JSONDecodeError:
        pytest.fail(f"squawk failed (exit {run.returncode}): {run.stderr.strip() or run.stdout[:500]}")
    assert isinstance(report, list), report
    return report


def tally(report: list[dict[str, object]]) -> Findings:
    return Counter((Path(str(f["file"])).name[:4], str(f["rule_name"])) for f in report)


def accepted() -> tuple[Findings, list[dict[str, Any]]]:
    entries: list[dict[str, Any]] = tomllib.loads(FROZEN.read_text(encoding="utf-8"))["finding"]
    return Counter({(e["migration"], e["rule"]): e["count"] for e in entries}), entries


def unexplained(found: Findings, allowed: Findings) -> list[str]:
    """Every difference between what squawk found and what frozen.toml accepts, one line each."""
    problems = []
    for version, rule in sorted(found | allowed):
        want, got = allowed[(version, rule)], found[(version, rule)]
        if got > want:
            problems.append(f"{version}: {rule} x{got - want} new (fix it, or `-- squawk-ignore {rule}` "
                            "with the reason, in a migration after 0012)")
        elif got < want:
            problems.append(f"{version}: {rule} accepted x{want} in squawk/frozen.toml but found x{got}")
    return problems


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    """Each migration as deploy runs it: the part in its transaction, and (in a second file) the
    statements it runs one by one outside any transaction (`-- jobkit:outside-transaction`)."""
    out = tmp_path_factory.mktemp("migrations")
    files, outside_files = [], []
    for migration in render_migrations(Settings()):
        proper, steps = outside.split(migration.sql)
        path = out / f"{migration.version}_{migration.name}.sql"
        path.write_text(proper, encoding="utf-8")
        files.append(path)
        if steps:
            path = out / f"{migration.version}_{migration.name}_outside.sql"
            path.write_text("".join(s.sql.replace(outside.BATCH, "1000").rstrip().rstrip(";") + ";\n" for s in steps),
                            encoding="utf-8")
            outside_files.append(path)
    return files, outside_files


def test_every_migration_is_squawk_clean_or_its_finding_accepted(rendered: tuple[list[Path], list[Path]]) -> None:
    files, outside_files = rendered
    assert len(files) >= 12 and outside_files
    allowed, _ = accepted()
    found = tally(lint(files)) + tally(lint(outside_files, CONFIG_OUTSIDE))
    assert unexplained(found, allowed) == []


def test_only_frozen_migrations_have_accepted_findings_each_with_a_reason() -> None:
    _, entries = accepted()
    for entry in entries:
        assert entry["migration"] <= LAST_FROZEN, f"{entry}: a new migration carries inline ignores instead"
        assert len(str(entry["reason"])) > 20 and isinstance(entry["hazard"], bool), entry
    assert len({(e["migration"], e["rule"]) for e in entries}) == len(entries), "one entry per rule"


def test_the_check_catches_a_new_violation_and_honours_an_inline_ignore(tmp_path: Path) -> None:
    bad = tmp_path / "0013_bad.sql"
    bad.write_text("set local statement_timeout = '5s';\n"
                   "alter table jobkit.jobs add constraint jobs_x check (priority > -100);\n")
    problems = unexplained(tally(lint([bad])), Counter())
    assert problems == ["0013: constraint-missing-not-valid x1 new (fix it, or `-- squawk-ignore "
                        "constraint-missing-not-valid` with the reason, in a migration after 0012)"]
    ignored = tmp_path / "0013_ignored.sql"
    ignored.write_text("set local statement_timeout = '5s';\n"
                       "-- squawk-ignore constraint-missing-not-valid\n"
                       "alter table jobkit.jobs add constraint jobs_x check (priority > -100);\n")
    assert lint([ignored]) == []


def test_a_frozen_finding_that_disappears_is_reported() -> None:
    assert unexplained(Counter(), Counter({("0002", "constraint-missing-not-valid"): 1})) == [
        "0002: constraint-missing-not-valid accepted x1 in squawk/frozen.toml but found x0"]
