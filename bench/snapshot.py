"""`python -m bench --snapshot ...`: benchmark a frozen copy of jobkit's committed code.

The working tree may change while a 15-minute run goes on (drain processes are spawned afresh and
import the code as it is at that moment). This exports the commit (``git archive``) to a temp dir,
lays it out as the ``jobkit`` package (toolkit/ plus _sql and _templates, as pyproject maps them),
and runs the benchmark in a child process whose PYTHONPATH puts that copy ahead of the editable
install. The bench harness itself still comes from this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "JOBKIT_BENCH_SNAPSHOT"  # "<commit> <subject>" of the frozen code, for the report


def run_frozen(argv: list[str], rev: str = "HEAD") -> int:
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", rev],
                            capture_output=True, text=True, check=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="jobkit-snapshot-"))
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "toolkit", "sql",
                                  "templates"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        (tmp / "toolkit" / "_sql").symlink_to(tmp / "sql", target_is_directory=True)
        (tmp / "toolkit" / "_templates").symlink_to(tmp / "templates", target_is_directory=True)
        (tmp / "pkgs").mkdir()
        (tmp / "pkgs" / "jobkit").symlink_to(tmp / "toolkit", target_is_directory=True)
        path = os.pathsep.join([str(tmp / "pkgs"), str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep), ENV: commit}
        print(f"benchmarking a frozen copy of {commit[:60]} from {tmp}")
        return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=ROOT, env=env).returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
