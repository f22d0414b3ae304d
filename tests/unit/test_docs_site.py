"""The docs site builds with `mkdocs build --strict` (no broken link, no page missing from the nav),
the README stays a front door (at most 250 lines, every link resolves), and the problems issue 26
found in the old README cannot come back."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from jobkit.cli import cli
from jobkit.cli.reference import commands

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```[^\n]*\n.*?^```", re.MULTILINE | re.DOTALL)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    # python -m mkdocs (not .venv/bin/mkdocs): griffe must find the package jobkit, not the script
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1",
                                                                          "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "tutorial/index.html", "reference/cli/index.html", "reference/python/index.html"):
        assert (tmp_path / page).is_file(), page
    assert "jobkit.enqueue.enqueue" in (tmp_path / "reference/python/index.html").read_text()


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_every_link_of_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    local = [t for t in _LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]
    assert len(local) >= 20
    for target in local:
        path, _, anchor = target.partition("#")
        file = ROOT / path
        assert file.exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), re.MULTILINE)
            slugs = {re.sub(r"[^a-z0-9 _-]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, target


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if not p.name.startswith("_")}
    assert pages and {p for p in pages if f" {p}\n" not in nav} == set()


def test_the_dashboard_table_lists_each_page_once() -> None:
    text = (DOCS / "guides" / "dashboard.md").read_text(encoding="utf-8")
    table = text[text.index("| page | what |"):]
    table = table[:table.index("\n\n")]
    names = [row.split("|")[1].strip() for row in table.splitlines()[2:]]
    assert len(names) == len(set(names)) >= 6, names
    assert "through a GIN `jsonb_path_ops` index only with `[dashboard] payload_index = true`" in table


def test_the_readme_names_only_job_types_its_handlers_define() -> None:
    text = README.read_text(encoding="utf-8")
    defined = set(re.findall(r'handler\("([\w.]+)"', text))
    defined |= set(re.findall(r'handler\("([\w.]+)"', (ROOT / "templates" / "jobs.py").read_text()))
    named = set(re.findall(r"--type ([\w.]+)", text)) | set(re.findall(r"jobkit enqueue ([\w.]+)", text))
    named |= set(re.findall(r"enqueue\('([\w.]+)'", text)) | set(re.findall(r'enqueue\([^,]+, "([\w.]+)"', text))
    assert named and named <= defined, named - defined


def test_every_command_the_readme_runs_exists() -> None:
    known = {" ".join(path) for path, _ in commands(cli)}
    groups = {path[0] for path, _ in commands(cli)}
    for block in _FENCE.findall(README.read_text(encoding="utf-8")):
        for words in re.findall(r"(?:^|[\s&|;(])jobkit ((?:[a-z-]+ ?){1,2})", block):
            first = words.split()
            assert first[0] in groups, words
            if " ".join(first[:2]) not in known and first[0] not in known:
                raise AssertionError(f"jobkit {words}")
