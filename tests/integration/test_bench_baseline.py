"""`python -m bench --baseline REF` end to end at its smallest: REF=HEAD built into a fresh cached
venv, both sides deployed with their own `jobkit deploy` and driven in their own interpreters on the
session cluster, two interleaved rounds, the table rendered. Asserts on what ran and what the
database saw (every driver's exactly-once check), never on a figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from jobkit.ops.localdb import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ lives next to tests/, outside the installed package
    sys.path.insert(0, str(ROOT))

from bench import baseline  # noqa: E402
from bench.baseline_venv import BaselineError, build, resolve, working_tree  # noqa: E402
from bench.cluster import BenchCluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_baseline_head_against_the_working_tree(cluster: LocalCluster, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBKIT_BENCH_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    old = build("HEAD", lines.append)
    # The old side imports its own installed copy, not the checkout's toolkit/.
    where = subprocess.run([str(old.python), "-I", "-c", "import jobkit; print(jobkit.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "cache"), where
    assert build("HEAD", lines.append) == old and len(lines) == 1  # the second build is the cache
    sides = {"old": old, "new": working_tree()}
    with BenchCluster.attach(cluster) as bench:
        run = baseline.run_pairs(bench, sides, baseline.SIZES["smoke"], 2, lines.append, None)
    log = "\n".join(lines)
    assert not run.failures(), log
    figures = [key for key, _label in baseline.FIGURES]
    assert [(s.round, s.side, s.figure) for s in run.samples] == [
        (r, side, f) for r, order in ((1, ("old", "new")), (2, ("new", "old"))) for f in figures for side in order
    ], log
    assert all(len(run.ratios(f)) == 2 for f in figures)
    text = baseline.render(run, sides, baseline.SIZES["smoke"], 2, "python -m bench --baseline HEAD --smoke",
                           {"cpu": "test", "PostgreSQL": "15"}, None, 1.0)
    assert text.count("**") >= 2 * len(figures) and "FAILED" not in text, text


def test_an_unknown_ref_is_one_line_naming_the_fix() -> None:
    with pytest.raises(BaselineError, match="pass a sha, a tag or a released version"):
        resolve("no such ref!")
    sha, label = resolve("HEAD")
    assert len(sha) == 40 and label.startswith("HEAD (")
