"""A real pg_cron tick (Debian's 1.4.2: minute granularity) wakes the worker through pg_net, and the
worker's secret appears nowhere it must not: cron.job, cron.job_run_details, the server log.

The tick comes once a minute: the scenario runs on a database of its own, in a process of its own,
from the session's first test (tests/crontick.py); this test waits for what it recorded."""

from __future__ import annotations

from crontick import Background
from jobkit.ops.localdb import LocalCluster


def test_a_real_pg_cron_tick_wakes_the_worker(cluster: LocalCluster, cron_tick: Background) -> None:
    tick = cron_tick.wait()
    # The insert trigger is off for email: it sent nothing, only cron wakes it.
    assert tick.wakeups_before_tick == 0
    assert tick.requests and tick.signed == "ok"  # signed with the secret
    assert tick.run["status"] == "succeeded"
    assert "wake('email')" in str(tick.run["command"])
    assert tick.outcome == "delivered"
    assert tick.cron_text and not any(tick.secret in text for text in tick.cron_text)
    log = (cluster.status().data_dir.parent / "postgres.log").read_text(errors="replace")
    assert "jobkit.wake" in log or "wake(" in log  # statement logging was on
    assert tick.secret not in log
