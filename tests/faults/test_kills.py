"""Faults in the worker process: kill -9 mid-drain (HTTP over pg_net, and --listen over NOTIFY), a
zombie that wakes up after its lease expired, a handler that takes its process down every time."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import psycopg
import pytest
from faultkit import Ticker, count, enqueue, exactly_once, prepare, wire_pg_net
from poll import wait_for
from standins import PgNetStandIn
from workers import Worker, free_port


def _transport(url: str, transport: str) -> tuple[tuple[str, ...], int | None]:
    """(worker arguments, fixed port) for a transport; pg_net gets the stand-in's schema."""
    if transport == "pg_net":
        port = free_port()
        wire_pg_net(url, f"http://127.0.0.1:{port}")
        return ("--concurrency", "8"), port
    prepare(url)
    return ("--concurrency", "8", "--listen"), None


@pytest.mark.parametrize("transport", ["pg_net", "notify"])
def test_kill_9_mid_drain(fault_url: str, workers: Callable[..., Worker], transport: str) -> None:
    url = fault_url
    args, port = _transport(url, transport)
    with PgNetStandIn(url) if transport == "pg_net" else nullcontext():
        victim = workers(url, *args, port=port)
        ids = enqueue(url, 120, seconds=0.1)
        wait_for(lambda: count(url, "status = 'completed'") >= 30, 20, "progress before the kill")
        victim.kill()
        in_flight = count(url, "status = 'processing'")
        with Ticker(url):  # pg_cron's sweep and wake-up, compressed into seconds
            workers(url, *args, port=port)  # the supervisor restarts it
            took = wait_for(lambda: count(url, "status = 'completed'") == len(ids), 40, "the rest drained")
    verdict = exactly_once(url, ids)
    verdict.report(f"kill -9 ({transport}): {in_flight} in flight, drained {took:.1f}s after the restart")
    assert verdict.completed == len(ids)
    assert len(verdict.rerun) <= in_flight  # only the attempts the kill cut off ran again


def test_a_zombie_worker_is_fenced_out(fault_url: str, workers: Callable[..., Worker]) -> None:
    """A worker stopped (SIGSTOP) past its lease: the sweep hands the job to another worker; when
    the zombie wakes up and finishes, its completion is refused."""
    url = fault_url
    prepare(url)
    zombie = workers(url, "--listen", "--concurrency", "1")
    [job] = enqueue(url, 1, seconds=2)
    wait_for(lambda: _runs(url) == 1, 10, "the zombie's attempt started")
    zombie.pause()
    try:
        with Ticker(url):
            rescuer = workers(url, "--listen", "--concurrency", "1")
            wait_for(lambda: count(url, "status = 'completed'") == 1, 30, "the rescue")
    finally:
        zombie.resume()
    code, out = zombie.stop()  # a graceful stop lets the zombie's handler finish and try to complete
    verdict = exactly_once(url, [job])
    verdict.report("zombie worker")
    assert verdict.completed == 1 and verdict.runs[job] == 2
    with psycopg.connect(url) as conn:
        result = conn.execute("select result ->> 'pid' from jobkit.jobs").fetchone()
    assert result is not None and int(result[0]) == rescuer.proc.pid  # the rescuer's result stands
    assert code == 0 and "'lost': 1" in out, out  # the zombie's completion was fenced out


def test_a_job_that_kills_its_worker_every_time_still_ends(
    fault_url: str, workers: Callable[..., Worker]
) -> None:
    """os._exit in the handler on every attempt: each attempt is consumed by the claim, the lease
    expires, the sweep counts it; after max_attempts (2) the job is failed. The other jobs complete."""
    url = fault_url
    prepare(url)
    others = enqueue(url, 20, seconds=0.01)
    [crasher] = enqueue(url, 1, "fault.crash")
    args = ("--listen", "--concurrency", "2")
    worker = workers(url, *args, healthy=False)  # its catch-up claims the crasher at once
    crashes = 0
    with Ticker(url):
        def settled() -> bool:
            nonlocal worker, crashes
            if not worker.alive:  # the supervisor restarts a worker that died
                code, _out = worker.output()
                assert code == 3
                crashes += 1
                worker = workers(url, *args, healthy=False)  # it may die again while starting
            return count(url, "id = %s and status = 'failed'", (crasher,)) == 1 and \
                count(url, "status = 'completed'") == len(others)
        wait_for(settled, 45, "the crasher failing for good")
    assert crashes == 2
    with psycopg.connect(url) as conn:
        row = conn.execute("select attempts, last_error from jobkit.jobs where id = %s", (crasher,)).fetchone()
    assert row is not None and row[0] == 2 and "lease expired" in row[1]
    exactly_once(url, others).report(f"a handler that crashes its process ({crashes} crashes)")


def _runs(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("select count(*) from side_effects").fetchone()
        return int(row[0]) if row else 0
