"""Issue 21 Found 10: the example project's pgTAP files (supabase/tests, run with pg_prove as
`supabase test db` does) pass on a database that already holds jobs, as a project in use does:
jobs of every state and of the pgTAP files' own type names' neighbours, owned jobs of other users
(UUID and third-party subjects), rate-limit buckets and attempt history. jobkit is deployed here with
`jobkit deploy` from supabase/jobkit.toml (what the example's migration files hold is checked by
test_supabase_example.py). Every file rolls back: the jobs are all still there afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from jobkit.config import load_settings
from jobkit.connector import Database, Session
from jobkit.jobs import Failure, NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.schema.deploy import DeployOptions, deploy

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "supabase" / "tests"
SUBJECTS = ("5b0c3e3e-6d7e-4a43-9e57-1f3f1b0f2a11", "user_2NNEqL2nrIRdJ194ndJqAHwEfxC",
            "auth0|5f7c8ec7c33c6c004bbafe82")


def _tool(name: str) -> str:
    path = shutil.which(name) or f"/usr/bin/{name}"
    assert Path(path).exists(), f"{name} not found (apt-get install postgresql-15 libtap-parser-sourcehandler-pgtap-perl)"
    return path


def _pg_env(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    env = {**os.environ, "PGDATABASE": unquote(parts.path.lstrip("/")), "PGCONNECT_TIMEOUT": "10"}
    for var, value in (("PGHOST", parts.hostname), ("PGPORT", parts.port), ("PGUSER", parts.username),
                       ("PGPASSWORD", parts.password)):
        if value:
            env[var] = unquote(str(value))
    for var in ("PGSERVICE", "PGOPTIONS", "PGSSLMODE"):
        env.pop(var, None)
    return env


def _fill(s: Session) -> None:
    """Jobs in every state, owned and not, with history and buckets."""
    life = Lifecycle(s)
    for sub in SUBJECTS:  # owned jobs, through the per-user API as PostgREST calls it
        s.execute("select set_config('request.jwt.claims', %s, false)",
                  (json.dumps({"role": "authenticated", "sub": sub}),))
        s.execute("set role authenticated")
        for n in range(3):
            s.execute("select jobkit_user.enqueue('export_report', %s::jsonb)", (json.dumps({"n": n}),))
        s.execute("reset role")
    s.execute("select set_config('request.jwt.claims', '', false)")
    life.enqueue_many([NewJob(t, {"n": n}) for t in ("send_email", "export_report", "pgtap") for n in range(20)])
    life.enqueue(NewJob("send_email", {"later": True}, delay=timedelta(hours=1)))
    claimed = life.claim("send_email", 6, "live-worker", timedelta(minutes=5))
    life.complete([(j.id, j.attempts, json.dumps({"ok": True})) for j in claimed[:2]])
    life.fail([Failure(claimed[2].id, claimed[2].attempts, "boom", permanent=True)])
    life.fail([Failure(claimed[3].id, claimed[3].attempts, "retry me")])
    s.execute("update jobkit.jobs set lease_expires_at = now() - interval '1 minute' where id = %s",
              (claimed[4].id,))  # a crashed worker's job, for the stuck sweep
    owned = life.claim("export_report", 4, "live-worker", timedelta(minutes=5))
    life.complete([(j.id, j.attempts, None) for j in owned[:2]])
    s.execute("update jobkit.jobs set completed_at = now() - interval '30 days' where status = 'completed'")
    s.execute("select jobkit.sweep_dead()")
    life.fail([Failure(claimed[5].id, claimed[5].attempts, "fatal", permanent=True)])  # failed, not yet dead
    s.execute("select jobkit.cancel_job(id) from jobkit.jobs where type = 'pgtap' limit 2")
    s.execute("insert into jobkit.rate_limits (key, rate, burst, tokens) values ('smtp', 1, 5, 5)")


def _census(s: Session) -> list[tuple[str, str | None, int]]:
    rows = s.all("select status, owner, count(*) as n from jobkit.jobs group by 1, 2 order by 1, 2")
    return [(r["status"], r["owner"], r["n"]) for r in rows]


@pytest.mark.parametrize("jobs", [True, False], ids=["with-jobs", "empty"])
def test_pgtap_files_pass_on_a_database_with_jobs(fresh_db: str, jobs: bool) -> None:
    settings = load_settings(ROOT / "supabase" / "jobkit.toml", db_url=fresh_db, env={})
    deploy(Database(fresh_db), settings, DeployOptions(schedules=False), echo=lambda _m: None)
    with Database(fresh_db).session() as s:
        if jobs:
            _fill(s)
        before = _census(s)
        assert not jobs or len({status for status, _owner, _n in before}) == 6 and any(o for _s, o, _n in before)
    env = _pg_env(fresh_db)
    setup = subprocess.run([_tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
                            "create schema if not exists extensions; "
                            "create extension if not exists pgtap with schema extensions;"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert setup.returncode == 0, setup.stderr
    prove = subprocess.run(
        [_tool("pg_prove"), "--ext", ".pg", "--ext", ".sql", "-r", str(TESTS.relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    output = prove.stdout + prove.stderr
    assert prove.returncode == 0 and prove.stdout.rstrip().endswith("Result: PASS"), output
    ran = re.search(r"^Files=(\d+), Tests=(\d+)", prove.stdout, re.MULTILINE)
    assert ran and int(ran.group(1)) == len(list(TESTS.glob("*.sql"))), output
    with Database(fresh_db).session() as s:
        assert _census(s) == before  # every file rolled back
