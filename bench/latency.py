"""Enqueue -> handler-start latency through each system's wake path.

A separate OS process enqueues one job at a time at a fixed rate (one job per statement, so every
job is its own commit and its own NOTIFY); each payload carries the wall-clock time just before
its enqueue call. The worker, in the benchmark process, records ``time.time() - payload['t']``
when the handler starts. Both sides read the same system clock.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from .common import Sample, percentile
from .verify import Check

#: An enqueuer factory: ``factory(url)`` returns (enqueue(payload dict), close()).
Factory = Callable[[str], tuple[Callable[[dict[str, Any]], None], Callable[[], None]]]


def start_paced(factory: str, url: str, rate: float, count: int) -> Any:
    """Start the enqueuing process; ``factory`` is "module:function". Returns the process."""
    proc = mp.get_context("spawn").Process(target=_paced_main, args=(factory, url, rate, count), daemon=True)
    proc.start()
    return proc


def _paced_main(factory: str, url: str, rate: float, count: int) -> None:
    module, name = factory.split(":")
    enqueue, close = getattr(importlib.import_module(module), name)(url)
    try:
        start = time.monotonic() + 0.2
        for i in range(count):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            enqueue({"i": i, "t": time.time()})
    finally:
        close()


class Recorder:
    """Collects (index, latency) pairs as handlers start."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.latencies: dict[int, float] = {}
        self.calls = 0

    def hit(self, payload: dict[str, Any]) -> None:
        self.calls += 1
        self.latencies.setdefault(int(payload["i"]), time.time() - float(payload["t"]))

    @property
    def done(self) -> bool:
        return len(self.latencies) >= self.count


def summarize(recorder: Recorder, check: Check, rate: float) -> Sample:
    """p50 as the value; p99, p90, max in extra (milliseconds)."""
    ms = [v * 1000 for v in recorder.latencies.values()]
    if not ms:
        return Sample(None, Check(False, "no job was handled"))
    extra = {"p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90), "p99_ms": percentile(ms, 99),
             "max_ms": max(ms), "jobs": len(ms), "rate": rate}
    return Sample(extra["p50_ms"], check, extra)


async def wait_done(recorder: Recorder, proc: Any, timeout: float) -> None:
    """Until every job was handled (or ``timeout`` after the enqueuer finished)."""
    import asyncio

    while proc.is_alive():
        await asyncio.sleep(0.05)
    deadline = time.monotonic() + timeout
    while not recorder.done and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # let the last completions commit
