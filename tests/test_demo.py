"""The demo (the README's main job) reaches every expected state, in-process and as `jobkit dev --demo`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobkit.connector import Database
from jobkit.demo import run_demo
from jobkit.jobs import Status


def test_run_demo_reaches_expected_states(db: Database) -> None:
    lines: list[str] = []
    outcomes = run_demo(db, "jobkit", lines.append)
    assert all(o.ok for o in outcomes), [(o.label, o.job.status) for o in outcomes]
    statuses = [o.job.status for o in outcomes]
    assert statuses.count(Status.DEAD) == 1 and statuses.count(Status.COMPLETED) == len(outcomes) - 1
    flaky = next(o.job for o in outcomes if o.job.type == "demo.flaky")
    assert flaky.attempts == 2
    assert any("idempotent duplicate" in line for line in lines)
    with db.session() as s:
        history = s.all("select outcome, count(*) as n from jobkit.job_attempts group by 1 order by 1")
    assert history == [{"outcome": "completed", "n": 8}, {"outcome": "failed", "n": 1},
                       {"outcome": "retry", "n": 2}]


@pytest.mark.slow
def test_jobkit_dev_demo_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """Its own local cluster under JOBKIT_HOME, deploy, demo, exit 0; then stop the cluster."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("DB_URL") and k != "DATABASE_URL"}
    env["JOBKIT_HOME"] = str(tmp_path / ".jobkit")
    try:
        result = subprocess.run([sys.executable, "-m", "jobkit", "dev", "--demo"], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "demo ok: 10 jobs reached their expected states" in result.stdout
    finally:
        subprocess.run([sys.executable, "-m", "jobkit", "db", "stop"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)
