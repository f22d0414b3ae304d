"""PostgreSQL restarts mid-drain (`pg_ctl restart -m immediate` and `-m fast`), for a worker woken
over pg_net (the stand-in) and one woken over NOTIFY (--listen). Nobody restarts the worker: it
waits out the outage, reconnects (LISTEN included), records the outcomes it still holds and
catches up. Only the sweep of expired leases runs on a ticker (pg_cron's job); the wake-up does not."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import psycopg
import pytest
from faultkit import Ticker, count, enqueue, exactly_once, prepare, wire_pg_net
from jobkit.ops.localdb import LocalCluster
from poll import wait_for
from standins import PgNetStandIn
from workers import Worker, free_port

DRAIN_WITHIN = 45.0  # seconds after the restart in which the queue must be empty


@pytest.mark.parametrize("mode", ["immediate", "fast"])
@pytest.mark.parametrize("transport", ["pg_net", "notify"])
def test_postgres_restart_mid_drain(restartable: LocalCluster, fault_url: str,
                                    workers: Callable[..., Worker], transport: str, mode: str) -> None:
    url = fault_url
    net: PgNetStandIn | None = None
    if transport == "pg_net":
        port = free_port()
        wire_pg_net(url, f"http://127.0.0.1:{port}")
        net = PgNetStandIn(url).start()
        worker = workers(url, "--concurrency", "8", port=port)
    else:
        prepare(url)
        worker = workers(url, "--concurrency", "8", "--listen")
    try:
        ids = enqueue(url, 200, seconds=0.05)
        wait_for(lambda: count(url, "status = 'completed'") >= 40, 20, "progress before the restart")
        restartable.restart(mode)
        if net is not None:  # the postmaster restarts pg_net's background worker; so does the test
            with contextlib.suppress(RuntimeError):
                net.stop()
            net.start()
        with Ticker(url, wake=False):
            took = wait_for(lambda: count(url, "status = 'completed'") == len(ids), DRAIN_WITHIN,
                            "the queue draining after the restart")
        assert worker.alive, "the worker exited"
        wait_for(worker.healthy, 15, "/healthz answering 200 again")
    finally:
        if net is not None:
            net.stop()
    verdict = exactly_once(url, ids)
    verdict.report(f"restart -m {mode} ({transport}): drained {took:.1f}s after the restart")
    assert verdict.completed == len(ids)


@pytest.mark.parametrize("listen", [False, True])
def test_a_worker_that_gives_up_exits_non_zero(restartable: LocalCluster, fault_url: str,
                                               workers: Callable[..., Worker], listen: bool) -> None:
    """The database stays unreachable longer than --give-up: the worker exits 1 with one line."""
    url = fault_url
    prepare(url)
    worker = workers(url, "--give-up", "3s", *(["--listen"] if listen else []))
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(restartable.url(), autocommit=True) as admin:
        admin.execute(f'alter database "{name}" allow_connections false')
        admin.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
    code, out = worker.output(timeout=40)
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert code == 1 and len(errors) == 1, out[-2000:]
    assert "unreachable for 3s" in errors[0] or "could not listen on jobkit_wake for 3s" in errors[0]
