"""The built package works on its own, installed the way a user's CI installs it: a wheel built from
the checkout, put where the `jobkit init` CI workflow looks (vendor/), installed into a fresh venv
outside the checkout by the workflow's own install step as written. Its `jobkit` script renders
byte-identical SQL to the checkout's and deploys to, then checks, the test database.

Slow (a venv and a pip install from the package registry): deselect with ``-m 'not slow'``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from jobkit.ops import scaffold
from versions import HEAD

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# Not part of a source tree: local state, caches and build output (a stale build/lib would leak
# deleted files into the wheel, which is why the tree is copied before `pip install`).
_NOT_SOURCE: tuple[str, ...] = (".git", ".venv", "venv", ".jobkit", "build", "dist", "*.egg-info")
_NOT_SOURCE += ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules")
_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SUPABASE_DB_URL", "DATABASE_URL")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _env() -> dict[str, str]:
    """The environment without anything that could point jobkit at the checkout or a config."""
    return {
        k: v for k, v in os.environ.items() if k not in _ENV_DROP and not k.startswith("JOBKIT_")
    }


def _run(cmd: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        cmd, cwd=cwd, env=_env(), capture_output=True, timeout=timeout, check=False
    )
    out, err = (stream.decode(errors="replace") for stream in (proc.stdout, proc.stderr))
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{out}\n{err}"
    return proc


def _dev_jobkit() -> list[str]:
    """The checkout's own jobkit: the running interpreter's venv, else the repo's .venv."""
    for script in (Path(sys.executable).parent / "jobkit", ROOT / ".venv" / "bin" / "jobkit"):
        if os.access(script, os.X_OK):
            return [str(script)]
    return [sys.executable, "-m", "jobkit"]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout, jobkit installed by the CI template's install step."""
    base = tmp_path_factory.mktemp("packaging")
    assert not base.is_relative_to(ROOT)
    source = base / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    project = base / "project"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(project / "vendor")],
         cwd=base, timeout=300)
    shutil.rmtree(source)  # the installed package must not need its source tree
    target = base / "venv"
    _run([sys.executable, "-m", "venv", str(target)], cwd=base)
    env, command = install_step(scaffold.init(project).written)
    assert env["JOBKIT_VERSION"] == VERSION  # `jobkit init` pins the version that wrote it
    run = subprocess.run(["bash", "-c", command], cwd=project, capture_output=True, text=True, timeout=780,
                         env={**_env(), **env, "PATH": f"{target / 'bin'}:{os.environ['PATH']}"})
    assert run.returncode == 0, f"{command}\n{run.stdout}\n{run.stderr}"
    return target


def install_step(written: list[Path]) -> tuple[dict[str, str], str]:
    """The workflow's env values and its `Install jobkit` step's command, as written."""
    [workflow] = [p for p in written if p.suffix == ".yml"]
    text = workflow.read_text()
    env = dict(re.findall(r'(?m)^\s+(JOBKIT_VERSION): "([^"]+)"$', text))
    [command] = re.findall(r"(?m)^\s+- name: Install jobkit\n\s+run: (.+)$", text)
    return env, command


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory: no jobkit.toml, no .jobkit, no checkout on sys.path."""
    path = tmp_path / "cwd"
    path.mkdir()
    return path


def test_installed_package_is_not_the_checkout(venv: Path, workdir: Path) -> None:
    code = "import jobkit, jobkit._sql, jobkit._templates; print(jobkit.__file__)"
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=workdir).stdout.decode().strip()
    assert Path(out).is_relative_to(venv), out


def test_version(venv: Path, workdir: Path) -> None:
    out = _run([str(venv / "bin" / "jobkit"), "--version"], cwd=workdir).stdout.decode()
    assert VERSION in out


def test_render_matches_the_checkout(venv: Path, workdir: Path) -> None:
    installed = _run([str(venv / "bin" / "jobkit"), "render"], cwd=workdir).stdout
    checkout = _run([*_dev_jobkit(), "render"], cwd=workdir).stdout
    assert installed.strip(), "jobkit render printed nothing"
    assert installed == checkout


def test_the_installed_jobkit_deploys_then_checks_the_database(venv: Path, workdir: Path, fresh_db: str) -> None:
    jobkit = str(venv / "bin" / "jobkit")
    env = {**_env(), "JOBKIT_DB_URL": fresh_db}
    for args in (["deploy"], ["deploy", "--check"]):
        run = subprocess.run([jobkit, *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"jobkit {' '.join(args)}: {run.stdout}\n{run.stderr}"
    assert f"up to date: schema jobkit at {HEAD}" in run.stdout, run.stdout
