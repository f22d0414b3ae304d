"""A real pg_cron tick (Debian's 1.4.2: minute granularity) wakes the worker through pg_net, and the
worker's secret appears nowhere it must not: cron.job, cron.job_run_details, the server log.

The tick comes once a minute: the scenario runs on a database of its own in the background from the
session's first test (tests/crontick.py); this test waits for what it recorded."""

from __future__ import annotations

from crontick import Background
from jobkit.worker.signing import HEADER, Verifier


def test_a_real_pg_cron_tick_wakes_the_worker(cron_tick: Background) -> None:
    tick = cron_tick.wait()
    # The insert trigger is off for email: it sent nothing, only cron wakes it.
    assert tick.wakeups_before_tick == 0
    seen = tick.seen
    assert seen and Verifier().check(seen[0].headers[HEADER], seen[0].body, [tick.secret]).ok
    assert tick.run["status"] == "succeeded"
    assert "wake('email')" in str(tick.run["command"])
    assert tick.outcome == "delivered"
    assert tick.cron_text and not any(tick.secret in text for text in tick.cron_text)
    assert "jobkit.wake" in tick.log or "wake(" in tick.log  # statement logging was on
    assert tick.secret not in tick.log
