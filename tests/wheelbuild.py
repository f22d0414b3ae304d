"""The packaging test's venv (tests/integration/test_packaging.py), built in the background.

Building a wheel from the checkout and installing it into a fresh venv outside the checkout, by the
`jobkit init` CI workflow's own install step, takes minutes (most of it waiting on the package
registry). tests/conftest.py starts the build when collection ends if the packaging tests were
collected, so that it overlaps the tests that run before them; the venv fixture waits for it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from jobkit.ops import scaffold

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# Not part of a source tree: local state, caches and build output (a stale build/lib would leak
# deleted files into the wheel, which is why the tree is copied before `pip install`).
_NOT_SOURCE: tuple[str, ...] = (".git", ".venv", "venv", ".jobkit", "build", "dist", "*.egg-info")
_NOT_SOURCE += ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules")
_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SUPABASE_DB_URL", "DATABASE_URL")
TIMEOUT = 900.0  # seconds for the whole build (the install step alone may take 780)


def clean_env() -> dict[str, str]:
    """The environment without anything that could point jobkit at the checkout or a config."""
    return {k: v for k, v in os.environ.items() if k not in _ENV_DROP and not k.startswith("JOBKIT_")}


def run(cmd: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; its stdout, or an AssertionError with both outputs when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, timeout=timeout,
                          check=False)
    out, err = (stream.decode(errors="replace") for stream in (proc.stdout, proc.stderr))
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{out}\n{err}"
    return out


def install_step(written: list[Path]) -> tuple[dict[str, str], str]:
    """The workflow's env values and its `Install jobkit` step's command, as written."""
    [workflow] = [p for p in written if p.suffix == ".yml"]
    text = workflow.read_text()
    env = dict(re.findall(r'(?m)^\s+(JOBKIT_VERSION): "([^"]+)"$', text))
    [command] = re.findall(r"(?m)^\s+- name: Install jobkit\n\s+run: (.+)$", text)
    return env, command


def build(base: Path) -> Path:
    """A fresh venv under ``base`` (outside the checkout) with jobkit installed from a wheel of the
    checkout by the CI template's install step; its path."""
    assert not base.is_relative_to(ROOT)
    source = base / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    project = base / "project"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(project / "vendor")],
        cwd=base, timeout=300)
    shutil.rmtree(source)  # the installed package must not need its source tree
    target = base / "venv"
    run([sys.executable, "-m", "venv", str(target)], cwd=base)
    env, command = install_step(scaffold.init(project).written)
    assert env["JOBKIT_VERSION"] == VERSION, env  # `jobkit init` pins the version that wrote it
    run(["bash", "-c", command], cwd=project, timeout=780,
        env={**clean_env(), **env, "PATH": f"{target / 'bin'}:{os.environ['PATH']}"})
    return target


class Background:
    """One build in a process of its own (`python -m wheelbuild BASE` in tests/: nothing a test patches
    in the pytest process reaches it); ``wait`` returns its venv or fails with its output."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="jobkit-packaging-"))
        self._proc = subprocess.Popen([sys.executable, "-m", "wheelbuild", str(self.base)],
                                      cwd=Path(__file__).parent, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
        self._out: str | None = None

    def _join(self) -> str:
        if self._out is None:
            try:
                self._out, _ = self._proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._out = self._proc.communicate()[0] + f"\n(killed after {TIMEOUT:.0f}s)"
        return self._out

    def wait(self) -> Path:
        out = self._join()
        assert self._proc.returncode == 0, f"building the packaging venv failed:\n{out[-5000:]}"
        return self.base / "venv"

    def remove(self) -> None:
        """At the end of the session: stop the build if it still runs (nothing waits for it any
        more), then delete its directory."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._join()
        shutil.rmtree(self.base, ignore_errors=True)


_started: Background | None = None


def start() -> Background:
    """Start the build unless it is under way; the one build of this session."""
    global _started
    if _started is None:
        _started = Background()
    return _started


def finish() -> None:
    """Remove the build's files, if a build was started."""
    if _started is not None:
        _started.remove()


if __name__ == "__main__":
    build(Path(sys.argv[1]))
