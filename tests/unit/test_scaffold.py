"""`jobkit init` writes a project that works as written: the CI workflow and the Dockerfile pin the
running jobkit's version, and the Dockerfile's command serves the handlers init wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from jobkit import __version__
from jobkit.ops.scaffold import init


def test_init_writes_the_worker_dockerfile_pinned_to_this_version(tmp_path: Path) -> None:
    report = init(tmp_path)
    names = sorted(str(p.relative_to(tmp_path)) for p in report.written)
    assert names == [".dockerignore", ".github/workflows/jobkit.yml", "Dockerfile", "jobkit.toml", "jobs.py"]
    dockerfile = (tmp_path / "Dockerfile").read_text()
    assert f"ARG JOBKIT_VERSION={__version__}\n" in dockerfile and "@JOBKIT_VERSION@" not in dockerfile
    assert f'JOBKIT_VERSION: "{__version__}"' in (tmp_path / ".github/workflows/jobkit.yml").read_text()
    [cmd] = re.findall(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    spec = json.loads(cmd)[3]  # ["jobkit", "worker", "serve", SPEC, ...]
    probe = ("from jobkit.worker.serve import load_registry; "
             f"print(sorted(load_registry({spec!r}).types))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "demo.email" in out.stdout, out.stderr
