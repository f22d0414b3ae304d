"""NOTIFY payloads are data from anyone (any role that can connect can NOTIFY on the wake channel):
the listener's parse never raises, and handing any payload to the listener either wakes a type with
a sane due time or is ignored and counted. Supervised tasks are restarted when they end."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jobkit.exceptions import WorkerGaveUp
from jobkit.worker.listen import MAX_AT, Listener, parse
from jobkit.worker.supervise import TaskState, supervise

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
WAKEUPS = st.fixed_dictionaries({}, optional={"type": JSON | st.text(max_size=30), "at": JSON,
                                              "calls": JSON})
PAYLOADS = (st.text(max_size=200)
            | JSON.map(lambda v: json.dumps(v, allow_nan=True))
            | WAKEUPS.map(lambda v: json.dumps(v, allow_nan=True))
            | st.integers(min_value=1, max_value=6000).map(lambda n: "[" * n)
            | st.integers(min_value=300, max_value=2000).map(
                lambda n: '{"type": "t", "at": 1' + "0" * n + "}"))


class Woken:
    """What the listener needs of a Dispatcher: it records the wake-ups."""

    def __init__(self) -> None:
        self.handled = {"t"}
        self.calls: list[tuple[str, float | None]] = []

    def wake(self, job_type: str, at: float | None = None) -> None:
        self.calls.append((job_type, at))


@settings(derandomize=True, max_examples=400, deadline=None)
@given(PAYLOADS)
@example("[" * 100_000)
@example('{"type": "t", "at": 1' + "0" * 400 + "}")
@example('{"type": "t", "at": 1e999}')
@example('{"type": "t", "at": NaN}')
@example('{"type": "t", "at": true}')
@example('{"type": "' + "x" * 7900 + '"}')
@example('{"type": "t", "at": 1767225600.5}')
def test_any_payload_is_a_wake_up_or_ignored_and_counted(payload: str) -> None:
    wake = parse(payload)
    if wake is not None:
        job_type, at = wake
        assert isinstance(job_type, str) and job_type
        assert at is None or (math.isfinite(at) and 0 <= at < MAX_AT)
    woken = Woken()
    listener = Listener(woken, None, "jobkit_wake")  # type: ignore[arg-type]
    listener._handle(payload)
    if wake is None:
        assert listener.invalid == 1 and not woken.calls
    else:
        assert listener.invalid == 0
        assert woken.calls in ([wake], []) and (woken.calls or wake[1] is not None)


@pytest.mark.parametrize("payload", [
    '{"type": "t", "calls": 3}', '{"type": "t", "at": 1767225600.5}', '{"type": "t", "at": 0}'])
def test_the_database_s_wake_ups_parse(payload: str) -> None:
    assert parse(payload) is not None


def test_a_failing_task_is_restarted_and_its_state_says_so() -> None:
    runs: list[float] = []
    seen: list[str] = []
    state = TaskState("demo")

    async def flaky() -> None:
        runs.append(asyncio.get_running_loop().time())
        if len(runs) <= 2:
            raise RuntimeError(f"bug {len(runs)}")
        await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.create_task(supervise(state, flaky, first_delay=0.05))
        while len(runs) < 3:
            seen.append(state.state)
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        assert state.state == "running" and not state.down and state.restarts == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert state.state == "stopped"

    asyncio.run(main())
    assert "restarting: RuntimeError: bug 1" in seen and "restarting: RuntimeError: bug 2" in seen
    assert runs[2] - runs[1] >= runs[1] - runs[0] >= 0.05  # backoff, doubling


def test_a_task_that_keeps_failing_gives_the_worker_up() -> None:
    state = TaskState("demo")

    async def broken() -> Any:
        raise RuntimeError("always")

    async def main() -> None:
        await supervise(state, broken, give_up=0.2, first_delay=0.05)

    with pytest.raises(WorkerGaveUp, match="worker task demo kept failing for .*RuntimeError: always"):
        asyncio.run(main())
    assert state.down and state.state.startswith("failed")


def test_a_task_that_returns_is_restarted_too() -> None:
    state = TaskState("demo")
    runs: list[int] = []

    async def quits() -> None:
        runs.append(1)
        if len(runs) > 1:
            await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.create_task(supervise(state, quits, first_delay=0.01))
        while len(runs) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert state.restarts == 1
