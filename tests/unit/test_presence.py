"""Worker presence (worker/presence.py) over the memory backend: beats register and refresh the row
with the jobs held, a clean stop marks it gone, and a backend that fails or hangs never stops the
beating (each failure counted, logged at most once a minute). ``--heartbeat`` takes 1s..1m or off."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.exceptions import ConfigError, ConnectionFailed
from jobkit.handlers import Registry
from jobkit.jobs import WorkerInfo
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from jobkit.worker.presence import MAX_HEARTBEAT, MIN_HEARTBEAT, Presence, describe, parse_heartbeat

FAST = timedelta(milliseconds=20)


def _info(every: timedelta = FAST) -> WorkerInfo:
    return describe("host:abc", transport="notify", concurrency=8, types=["mail"], heartbeat=every)


class Flaky(MemoryBackend):
    """Its heartbeat fails ``failures`` times (the database away), or hangs when ``hang``."""

    def __init__(self, failures: int = 0, hang: bool = False) -> None:
        super().__init__()
        self.failures, self.hang, self.calls = failures, hang, 0

    async def worker_beat(self, worker: WorkerInfo, running: int) -> None:
        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        if self.failures:
            self.failures -= 1
            raise ConnectionFailed("connection refused", hint="start the database")
        await super().worker_beat(worker, running)


def test_a_beat_registers_and_refreshes_the_row_and_leave_marks_it_gone() -> None:
    async def scenario() -> None:
        backend = MemoryBackend()
        held = [3]
        presence = Presence(backend, _info(), lambda: held[0])
        assert await presence.beat()
        info, running, first, gone = backend.workers["host:abc"]
        assert (info.transport, info.concurrency, info.types, running, gone) == ("notify", 8, ("mail",), 3, None)
        held[0] = 1
        assert await presence.beat()
        assert backend.workers["host:abc"][1] == 1 and backend.workers["host:abc"][2] >= first
        await presence.leave()
        assert backend.workers["host:abc"][1] == 0 and backend.workers["host:abc"][3] == "stopped"
        assert presence.beats == 2 and presence.missed == 0

    asyncio.run(scenario())


def test_failures_are_counted_logged_once_and_beating_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> Presence:
        backend = Flaky(failures=5)
        presence = Presence(backend, _info(), lambda: 0)
        task = asyncio.create_task(presence.run())
        while presence.beats < 2:  # five failures, then it is written again (and again)
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert backend.calls >= 7 and "host:abc" in backend.workers
        return presence

    with caplog.at_level(logging.INFO, logger="jobkit.worker.presence"):
        presence = asyncio.run(scenario())
    failed = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert len(failed) == 1 and "connection refused" in failed[0].getMessage()  # throttled: 1 a minute
    assert any("written again after 5 failed" in r.getMessage() for r in caplog.records)
    assert presence.missed == 0


def test_a_hung_database_times_each_beat_out() -> None:
    async def scenario() -> tuple[bool, int]:
        presence = Presence(Flaky(hang=True), _info(), lambda: 0)
        ok = await presence.beat()
        return ok, presence.missed

    assert asyncio.run(scenario()) == (False, 1)


def test_a_failing_leave_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(MemoryBackend):
        async def worker_gone(self, worker_id: str) -> None:
            raise ConnectionFailed("connection refused", hint="start the database")

    with caplog.at_level(logging.WARNING, logger="jobkit.worker.presence"):
        asyncio.run(Presence(Refusing(), _info(), lambda: 0).leave())
    assert any("could not mark this worker gone" in r.getMessage() for r in caplog.records)


def test_the_endpoint_registers_its_drainer_and_leaves_on_stop() -> None:
    jobs = Registry()

    @jobs.handler("mail")
    async def mail(payload: Any, ctx: Any) -> None:
        return None

    async def scenario() -> MemoryBackend:
        backend = MemoryBackend()
        endpoint = WorkerEndpoint(jobs, backend, EndpointOptions(heartbeat=timedelta(seconds=1), listen=None))
        drainer = await endpoint.start()
        while drainer.worker_id not in backend.workers:
            await asyncio.sleep(0.01)
        info = backend.workers[drainer.worker_id][0]
        assert (info.transport, info.types, info.concurrency) == ("pg_net", ("mail",), 16)
        await endpoint.stop()
        assert backend.workers[drainer.worker_id][3] == "stopped"
        return backend

    asyncio.run(scenario())


def test_heartbeat_off_and_the_bounds() -> None:
    assert parse_heartbeat("off") is None and parse_heartbeat(" OFF ") is None
    assert parse_heartbeat("5s") == timedelta(seconds=5)
    assert parse_heartbeat("1s") == MIN_HEARTBEAT and parse_heartbeat("1m") == MAX_HEARTBEAT
    for bad in ("999ms", "61s", "1h", "0s"):
        with pytest.raises(ConfigError, match="from 1s to 1m"):
            parse_heartbeat(bad)


@given(st.text(max_size=30))
def test_any_heartbeat_text_is_a_bounded_interval_off_or_one_config_error(text: str) -> None:
    try:
        every = parse_heartbeat(text)
    except ConfigError as exc:
        assert exc.hint and "\n" not in exc.message
        return
    assert every is None or MIN_HEARTBEAT <= every <= MAX_HEARTBEAT
