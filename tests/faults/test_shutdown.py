"""Ctrl-C and SIGTERM with long sync handlers running (threads, which nothing can stop).

A job goes back to pending only when its handler can no longer be running: the jobs that had not
started at once, the ones whose threads are still running after --grace only as the process exits.
Another worker started at the same moment drains what was handed back; every job starts exactly
once, except the ones whose handler was cut off by the exit, and none of those ran on after its
job was started again. A second signal exits at once. Releases are recorded as 'released', and
the log's counts agree with each other and with the database."""

from __future__ import annotations

import ast
import re
import signal
import threading
import time
from collections.abc import Callable
from uuid import UUID

import psycopg
import pytest
from faultkit import Ticker, count, enqueue, prepare
from poll import wait_for
from workers import Worker

GRACE = 3.0  # seconds


def _tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("create table side_effect_ends (job_id uuid not null, pid int not null,"
                     " at timestamptz not null default clock_timestamp())")
        conn.execute("grant all on side_effect_ends to public")


def _rows(url: str, sql: str, params: object = None) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql, params))  # type: ignore[arg-type]


def _starts(url: str) -> dict[UUID, list[int]]:
    """Job -> the pids that started it, in order."""
    runs: dict[UUID, list[int]] = {}
    for job, pid in _rows(url, "select job_id, pid from side_effects order by at"):
        runs.setdefault(job, []).append(pid)  # type: ignore[arg-type]
    return runs


def _stop_within(worker: Worker, sig: int, seconds: float) -> tuple[float, str]:
    """Signal the worker; the seconds until it exited, and its output."""
    sent = time.monotonic()
    worker.proc.send_signal(sig)
    out, _ = worker.proc.communicate(timeout=seconds)  # TimeoutExpired fails the test
    return time.monotonic() - sent, out


def _read_until(worker: Worker, text: str, seconds: float) -> str:
    """The worker's output up to and including the first line holding ``text``; the process is
    killed (and the test fails) if no such line comes within ``seconds``."""
    timer = threading.Timer(seconds, worker.proc.kill)
    timer.start()
    lines: list[str] = []
    try:
        assert worker.proc.stdout is not None
        while not lines or text not in lines[-1]:
            line = worker.proc.stdout.readline()
            assert line, f"the worker ended before saying {text!r}:\n" + "".join(lines)
            lines.append(line)
    finally:
        timer.cancel()
    return "".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_shutdown_with_running_sync_handlers_starts_no_job_twice(
        fault_url: str, workers: Callable[..., Worker], sig: int) -> None:
    url = fault_url
    prepare(url)
    _tables(url)
    long = [job for _ in range(3) for job in enqueue(url, 1, "fault.sleepy", seconds=60)]  # in this order
    quick = enqueue(url, 1, "fault.sleepy", seconds=1.5)  # finishes within the grace
    waiting = enqueue(url, 6, "fault.sleepy", seconds=0.1)  # claimed, waiting for a slot
    first = workers(url, "--listen", "--concurrency", "4", "--prefetch", "3", "--grace", f"{GRACE:g}s")
    wait_for(lambda: sum(len(p) for p in _starts(url).values()) == 4, 20, "four handlers started")
    assert set(_starts(url)) == {*long, *quick}
    first.proc.send_signal(sig)
    sent = time.monotonic()
    second = workers(url, "--listen", "--concurrency", "4")  # drains whatever is handed back
    out, _ = first.proc.communicate(timeout=GRACE + 15)  # not the 60 s the threads would take
    took = time.monotonic() - sent
    with Ticker(url, wake=False):  # nothing should be left to a lease, but do not hang if it is
        wait_for(lambda: count(url, "status = 'completed'") == 10, 40, "every job completed")
    starts = _starts(url)
    ends = {(job, pid) for job, pid in _rows(url, "select job_id, pid from side_effect_ends")}
    a, b = first.proc.pid, second.proc.pid
    assert {job: starts[job] for job in quick} == {quick[0]: [a]}, out
    assert {job: starts[job] for job in waiting} == {job: [b] for job in waiting}, out
    assert {job: starts[job] for job in long} == {job: [a, b] for job in long}, out  # cut off by the exit
    assert not any((job, a) in ends for job in long), out  # ... and never ran on past it
    assert (quick[0], a) in ends
    outcomes = dict(_rows(url, "select outcome, count(*) from jobkit.job_attempts group by 1"))
    assert outcomes == {"released": 9}, outcomes  # recorded as releases, not snoozes
    assert GRACE - 0.5 <= took, out  # the long handlers had their grace
    _assert_one_story(out, released=9, at_exit=3)


def _assert_one_story(out: str, *, released: int, at_exit: int) -> None:
    """The log's counts agree: what each drain says it released, what shutdown released at once
    and at exit, and the final total."""
    drained = [ast.literal_eval(m) for m in re.findall(r"drained fault\.sleepy: (\{.*\})", out)]
    at_once = [int(n) for n in re.findall(r"shutdown: stopped claiming; (\d+) job\(s\) that had not started", out)]
    final = re.findall(r"worker stopped; (\d+) claimed job\(s\) released, (\d+) of them as the process exits", out)
    assert final == [(str(released), str(at_exit))], out
    assert at_once == [released - at_exit], out
    assert all(d["released"] == released for d in drained), out  # one type: one drain, if it ended


def test_a_second_signal_exits_at_once(fault_url: str, workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    _tables(url)
    ids = enqueue(url, 4, "fault.sleepy", seconds=60)
    worker = workers(url, "--listen", "--concurrency", "2", "--prefetch", "2", "--grace", "60s")
    wait_for(lambda: sum(len(p) for p in _starts(url).values()) == 2, 20, "two handlers started")
    worker.proc.send_signal(signal.SIGTERM)
    # the worker's own word that its release is done (the database commits it a moment before)
    said = _read_until(worker, "shutdown: stopped claiming", 10)
    assert count(url, "status = 'pending'") == 2, said  # the jobs that had not started: released
    took, out = _stop_within(worker, signal.SIGTERM, 10)  # not the 60 s grace, nor the threads' 60 s
    out = said + out
    assert worker.proc.returncode == 1, out
    assert "error: a second SIGTERM: exiting at once; 2 unfinished job(s) are left to their leases" in out, out
    assert count(url, "status = 'processing'") == 2  # not released: their leases expire
    assert len(ids) == 4 and took < 10
