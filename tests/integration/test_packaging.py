"""The built package works on its own, installed the way a user's CI installs it: a wheel built from
the checkout, put where the `jobkit init` CI workflow looks (vendor/), installed into a fresh venv
outside the checkout by the workflow's own install step as written. Its `jobkit` script renders
byte-identical SQL to the checkout's and deploys to, then checks, the test database.

Slow (a venv and a pip install from the package registry): deselect with ``-m 'not slow'``. The venv is
built in the background from the end of collection (tests/wheelbuild.py), overlapping earlier tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import wheelbuild
from versions import HEAD

ROOT = Path(__file__).resolve().parents[2]
VERSION = wheelbuild.VERSION

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(cmd: list[str], cwd: Path) -> str:
    return wheelbuild.run(cmd, cwd)


def _dev_jobkit() -> list[str]:
    """The checkout's own jobkit: the running interpreter's venv, else the repo's .venv."""
    for script in (Path(sys.executable).parent / "jobkit", ROOT / ".venv" / "bin" / "jobkit"):
        if os.access(script, os.X_OK):
            return [str(script)]
    return [sys.executable, "-m", "jobkit"]


@pytest.fixture(scope="module")
def venv() -> Path:
    """A fresh venv outside the checkout, jobkit installed by the CI template's install step: built
    in the background since collection ended (tests/wheelbuild.py), or from here when it was not."""
    return wheelbuild.start().wait()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory: no jobkit.toml, no .jobkit, no checkout on sys.path."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def test_installed_package_is_not_the_checkout(venv: Path, workdir: Path) -> None:
    code = "import jobkit, jobkit._sql, jobkit._templates; print(jobkit.__file__)"
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=workdir).strip()
    assert Path(out).is_relative_to(venv), out


def test_version(venv: Path, workdir: Path) -> None:
    out = _run([str(venv / "bin" / "jobkit"), "--version"], cwd=workdir)
    assert VERSION in out


def test_render_matches_the_checkout(venv: Path, workdir: Path) -> None:
    installed = _run([str(venv / "bin" / "jobkit"), "render"], cwd=workdir)
    checkout = _run([*_dev_jobkit(), "render"], cwd=workdir)
    assert installed.strip(), "jobkit render printed nothing"
    assert installed == checkout


def test_the_installed_jobkit_deploys_then_checks_the_database(venv: Path, workdir: Path, fresh_db: str) -> None:
    jobkit = str(venv / "bin" / "jobkit")
    env = {**wheelbuild.clean_env(), "JOBKIT_DB_URL": fresh_db}
    for args in (["deploy"], ["deploy", "--check"]):
        run = subprocess.run([jobkit, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"jobkit {' '.join(args)}: {run.stdout}\n{run.stderr}"
    assert f"up to date: schema jobkit at {HEAD}" in run.stdout, run.stdout
