"""Every code block of README.md and docs/**/*.md runs or is checked (tests/docs/examples.py says
how, per language), and the counts docs/index.md gives are what the pages hold."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples import PAGES, ROOT, Background, evaluate, tally
from jobkit.ops.localdb import LocalCluster

_NEEDS_DB = re.compile(r"\bdb_url\b|\bserver_url\b")


@pytest.fixture
def modules() -> Iterator[None]:
    """Pages may register the module their examples import (``app.jobs``); removed afterwards."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "app" or name.startswith("app."):
            del sys.modules[name]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_of_the_page_runs(page: Path, request: pytest.FixtureRequest, modules: None) -> None:
    background = Background()
    namespace: dict[str, Any] = {"drain_in_background": background, "__name__": "docs_example"}
    if _NEEDS_DB.search(page.read_text(encoding="utf-8")):
        namespace["db_url"] = request.getfixturevalue("db_url")
        cluster: LocalCluster = request.getfixturevalue("cluster")
        namespace["server_url"] = cluster.url("postgres")
    skipped: list[str] = []
    try:
        evaluate(page, namespace, skipped.append)
    finally:
        background.close()


def test_the_counts_in_the_docs_are_the_pages() -> None:
    counts = tally()
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    stated = {kind: n for n, kind in re.findall(r"\*\*(\d+)\*\* (run|validated|compiled only|not runnable)", index)}
    assert {k: int(v) for k, v in stated.items()} == {
        k: counts.kinds[k] for k in ("run", "validated", "compiled only", "not runnable")}, counts
    for reason in counts.reasons:
        assert reason.split(": ", 1)[1] in index, f"list the reason on docs/index.md: {reason}"
    assert counts.languages["none"] == 0, "give every fenced block a language"
    assert counts.kinds["unchecked"] == 0, counts.reasons
    assert counts.kinds["run"] >= 10


def test_the_counter_reads_marks_and_languages(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('```python\nx = 1\n```\n\n<!-- skip: next "needs a browser" -->\n```js\nf()\n```\n\n'
                    '<!-- compile-only: "needs your app" -->\n```python\nimport os\n```\n\n```toml\na = 1\n```\n'
                    '\n```text\noutput\n```\n')
    counts = tally([page])
    assert dict(counts.kinds) == {"run": 1, "not runnable": 1, "compiled only": 1, "validated": 1, "setup": 0}
    page.write_text("```js\nf()\n```\n")   # a language nothing checks, without a mark
    assert tally([page]).kinds["unchecked"] == 1
