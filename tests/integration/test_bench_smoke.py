"""The benchmark harness (bench/, `python -m bench`) still runs end to end: its smoke preset on the
session cluster, jobkit only. Asserts that every measurement was taken and passed its exactly-once
check; never asserts on timings."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from jobkit.connector import Database
from jobkit.ops.localdb import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ lives next to tests/, outside the installed package
    sys.path.insert(0, str(ROOT))

from bench import jk, verify  # noqa: E402
from bench.common import DrainConfig, Sample  # noqa: E402
from bench.report import cell  # noqa: E402
from bench.runner import PRESETS, Results  # noqa: E402
from bench.smoke import run_smoke  # noqa: E402
from bench.systems import JOBKIT  # noqa: E402


def test_bench_smoke_exactly_once(cluster: LocalCluster) -> None:
    lines: list[str] = []
    results = run_smoke(cluster, echo=lines.append)
    log = "\n".join(lines)
    expected = {"enqueue_single", "enqueue_bulk", "drain_c1", "drain_c4", "drain_procs", "drain_defaults",
                "latency_p50", "direct_300", "wake_pg_net_300", "wake_notify_300", "burst_p50", "burst_p99",
                "burst_nolinger_p50", "delayed_p50", "delayed_p99", "retry_p50", "retry_p99",
                "claim_small", "claim_large", "claim_future", "bloat_prune_on", "bloat_prune_off"}
    measured = {metric for (system, metric) in results.samples if system == "jobkit"}
    assert expected <= measured, log
    failed = {k: [s.check.detail for s in v if not s.ok] for k, v in results.samples.items()
              if any(not s.ok for s in v)}
    assert not failed, f"{failed}\n{log}"
    assert results.all_ok, log


def test_bench_check_catches_a_double_completion(db_url: str) -> None:
    """The exactly-once check is not vacuous: a job that ran a second time (its first lease expired)
    fails it, and the report prints FAILED instead of the figure."""
    jk.fill(db_url, 20)
    tally = verify.Tally()
    asyncio.run(jk.drain_async(db_url, DrainConfig(4), tally))
    assert verify.jobkit(db_url, 20, tally).ok
    with Database(db_url).session() as session:
        session.execute("insert into jobkit.job_attempts (job_id, attempt, outcome) "
                        "select id, 1, 'lease_expired' from jobkit.jobs limit 1")
    check = verify.jobkit(db_url, 20, tally)
    assert not check.ok and "job_attempts" in check.detail
    results = Results(PRESETS["smoke"], [JOBKIT])
    results.add("jobkit", "drain_c4", Sample(1234.0, check))
    assert cell(results, "jobkit", "drain_c4") == "**FAILED**"


def test_dashboard_bench_runs_and_uses_indexes(db_url: str) -> None:
    """bench/dashboard.py at 20,000 jobs: every page query runs, and none reads jobs or
    job_attempts sequentially (the plans at a million jobs are in docs/BENCHMARKS.md)."""
    from bench import dashboard

    found = dashboard.run(db_url, 20_000, echo=lambda _m: None)
    assert len(found) >= 25
    assert dashboard.ok(found), [(c.query, c.label, m["seq"]) for c, m in found
                                 if {"jobs", "job_attempts"} & set(m["seq"]) and not c.may_scan]
    assert "| jobs | `dash_jobs_page` |" in dashboard.table(found, 20_000, "test")


def test_user_steps_bench_measures_every_case(cluster: LocalCluster) -> None:
    """bench/user_steps.py once: every case and shape measured (the per-row variant's trigger
    swapped in); its databases are dropped afterwards."""
    from bench import user_steps
    from bench.cluster import BenchCluster

    bench = BenchCluster.attach(cluster)
    result = user_steps.measure(bench, 1)
    assert set(result) == {(shape, case) for shape in user_steps.SHAPES for case in user_steps.CASES}
    assert all(len(v) == 1 and v[0] > 0 for v in result.values())
    with bench.admin() as admin:
        for i in range(len(user_steps.CASES)):
            admin.execute_with_identifiers("drop database if exists {n} with (force)", n=f"us_{i}")
