"""The demo (the README's main job): the example handlers woken through the database, every job
in its expected final state; in-process, and as a new user runs it (`jobkit init`, `jobkit dev --demo`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from jobkit.config import RateLimitConfig, Settings
from jobkit.connector import Database
from jobkit.jobs import Status
from jobkit.ops.demo import run_demo
from jobkit.ops.example import example_registry
from jobkit.schema.deploy import DeployOptions, deploy
from poll import wait_for


def test_run_demo_reaches_expected_states(db: Database, db_url: str) -> None:
    settings = Settings(db_url=db_url, ratelimits={"demo-api": RateLimitConfig(2.0, 1)})
    deploy(db, settings, DeployOptions(), echo=lambda _m: None)
    lines: list[str] = []
    outcomes = asyncio.run(run_demo(db, settings, example_registry(), lines.append))
    assert all(o.ok for o in outcomes), [(o.label, o.job.status, o.job.attempts) for o in outcomes]
    statuses = [o.job.status for o in outcomes]
    assert statuses.count(Status.DEAD) == 1 and statuses.count(Status.COMPLETED) == len(outcomes) - 1
    assert any("woke the worker over notify" in line for line in lines)
    with db.session() as s:
        history = {r["outcome"]: r["n"] for r in s.all(
            "select outcome, count(*) as n from jobkit.job_history group by 1")}
        api_starts = s.all("select started_at from jobkit.jobs where type = 'demo.api' order by started_at")
    assert history == {"completed": 12, "retry": 2, "failed": 1, "snoozed": 1}
    spread = (api_starts[-1]["started_at"] - api_starts[0]["started_at"]).total_seconds()
    assert spread >= 2.0  # six calls under a 2/s limit with a burst of 1


@pytest.mark.slow
def test_init_then_dev_demo_as_a_new_user(tmp_path: Path) -> None:
    """A new project folder: `jobkit init`, then `jobkit dev --demo` with its own local cluster."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("DB_URL") and k != "DATABASE_URL"}
    env["JOBKIT_HOME"] = str(tmp_path / ".jobkit")
    run = [sys.executable, "-m", "jobkit"]
    try:
        init = subprocess.run([*run, "init"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert init.returncode == 0, init.stderr
        assert (tmp_path / "jobs.py").is_file() and (tmp_path / "jobkit.toml").is_file()
        result = subprocess.run([*run, "dev", "--demo"], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "demo ok: 13 jobs reached their expected states" in result.stdout
    finally:
        subprocess.run([*run, "db", "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=120)


@pytest.mark.slow
def test_jobkit_dev_live_runs_handlers_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    import signal

    env = {k: v for k, v in os.environ.items() if not k.endswith("DB_URL") and k != "DATABASE_URL"}
    env["JOBKIT_HOME"] = str(tmp_path / ".jobkit")
    run = [sys.executable, "-m", "jobkit"]
    proc = subprocess.Popen([*run, "dev"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    up = threading.Event()

    def read() -> None:  # `jobkit dev` says "worker up" once deployed and LISTENing
        for line in proc.stdout or []:
            lines.append(line)
            if line.startswith("worker up"):
                up.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert up.wait(90), "".join(lines)
        url = subprocess.run([*run, "db", "url"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        with Database(url).session() as s:
            job_id = s.scalar("select jobkit.enqueue('demo.email', '{\"to\": \"x@example.com\"}')")
            wait_for(lambda: s.scalar("select status from jobkit.jobs where id = %s", (job_id,)) == "completed",
                     60, "jobkit dev ran the job", every=0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, "".join(lines)
        reader.join(timeout=10)
        out = "".join(lines)
        assert "stopped the local database" in out
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([*run, "db", "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=120)
