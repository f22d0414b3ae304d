"""Durable steps under kill -9 (issue 25's acceptance): N jobs of five steps each, every step run
recording a side effect per (job, step, attempt), run by a real `jobkit worker serve --listen`
that is killed twice mid-drain and restarted. Completed steps never run again; each kill makes
each job it cut off run at most one step once more (the step it interrupted, if any), and every
job completes exactly once.

The acceptance asks for 1,000 jobs; the suite runs STEPS_FAULT_JOBS (default 120, about 20 s).
`JOBKIT_STEPS_FAULT_JOBS=1000 .venv/bin/python -m pytest tests/faults/test_steps_kill.py -s` runs
the full size (docs/BENCHMARKS.md, "Issue 25: durable steps")."""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg
from fault_handlers import STEPS
from faultkit import Ticker, count, enqueue, exactly_once, prepare
from poll import wait_for
from workers import Worker

JOBS = int(os.environ.get("JOBKIT_STEPS_FAULT_JOBS", "120"))
KILLS = 2


def _cut_off(url: str) -> tuple[int, int]:
    """Of the jobs processing now: how many were inside a step (a run recorded, its result not
    stored) and how many were not (between two steps, or claimed and not started yet)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("""
            with running as (select id, attempts from jobkit.jobs where status = 'processing'),
            open_steps as (
                select distinct r.id from running r join step_effects e
                    on e.job_id = r.id and e.attempt = r.attempts
                where not exists (select 1 from jobkit.job_steps t where t.job_id = r.id
                                  and t.name = e.step and t.status = 'completed'))
            select (select count(*) from open_steps), (select count(*) from running)""").fetchone()
    assert row is not None
    return int(row[0]), int(row[1]) - int(row[0])


def test_kill_9_between_and_inside_steps(fault_url: str, workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    args = ("--listen", "--concurrency", "8")
    ids = enqueue(url, JOBS, "fault.steps", seconds=0.02)
    inside = between = 0
    with Ticker(url):  # pg_cron's sweep and wake-up, compressed into seconds
        victim = workers(url, *args)
        for kill in range(1, KILLS + 1):
            wait_for(lambda k=kill: count(url, "status = 'completed'") >= k * JOBS // (KILLS + 2), 60,
                     f"progress before kill {kill}")
            victim.kill()
            cut = _cut_off(url)
            inside, between = inside + cut[0], between + cut[1]
            victim = workers(url, *args)  # the supervisor restarts it
        took = wait_for(lambda: count(url, "status = 'completed'") == len(ids), 120, "the rest drained")
    verdict = exactly_once(url, ids)  # every job completed exactly once (one completing attempt)
    assert verdict.completed == len(ids)
    with psycopg.connect(url, autocommit=True) as conn:
        rerun_after_stored = conn.execute("""
            select count(*) from step_effects e join jobkit.job_steps t
              on t.job_id = e.job_id and t.name = e.step and t.status = 'completed'
            where e.attempt > t.attempt""").fetchone()
        per_job = conn.execute("""
            select e.job_id, count(*) - count(distinct e.step) as extra, count(distinct e.step) as steps
            from step_effects e where e.job_id = any(%s) group by e.job_id""", (ids,)).fetchall()
        stored = conn.execute("select count(*) from jobkit.job_steps where job_id = any(%s) "
                              "and status = 'completed'", (ids,)).fetchone()
    assert rerun_after_stored == (0,)  # a completed step never ran again
    assert len(per_job) == len(ids) and all(steps == STEPS for _j, _e, steps in per_job)
    assert all(extra <= KILLS for _j, extra, _s in per_job)  # at most one step once more per kill
    extra_runs = sum(extra for _j, extra, _s in per_job)
    assert extra_runs <= inside  # only the steps a kill interrupted ran again
    assert stored == (len(ids) * STEPS,)
    print(f"[faults] durable steps, {KILLS} x kill -9: {JOBS} jobs x {STEPS} steps, "
          f"{verdict.completed}/{JOBS} completed exactly once; cut off {inside} inside a step and {between} "
          f"between steps (or not started); {extra_runs} step re-run(s), 0 after a stored result; "
          f"drained {took:.1f}s after the last restart")
