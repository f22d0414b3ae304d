"""The built package works on its own: a non-editable install into a fresh venv outside the checkout
has a working `jobkit` script whose `jobkit render` output is byte-identical to the checkout's.

Slow (a venv and a pip install from the package registry): deselect with ``-m 'not slow'``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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
    """A fresh venv outside the checkout with jobkit installed from a copy of the source tree."""
    base = tmp_path_factory.mktemp("packaging")
    assert not base.is_relative_to(ROOT)
    source = base / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    target = base / "venv"
    _run([sys.executable, "-m", "venv", str(target)], cwd=base)
    pip = [str(target / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "install", str(source)], cwd=base, timeout=780)
    shutil.rmtree(source)  # the installed package must not need its source tree
    return target


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
