"""Supervising a worker's long-lived tasks: none of them may end silently.

A worker process runs a few tasks for as long as it lives (the database watch, the LISTEN
connection, the tending loop). ``supervise`` runs one of them: whenever it ends for any reason
other than cancellation (shutdown), an exception or a plain return, that is logged with its
traceback and the task is started again after a backoff (0.5 s doubling up to 30 s). Its
:class:`TaskState` says what it is doing, for /healthz, which answers 503 while any task is down.
A task that raises WorkerGaveUp, or that keeps failing (no run lasting STABLE seconds) for
``give_up``, is not restarted: ``supervise`` raises WorkerGaveUp, and the worker exits non-zero
with one line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from ..durations import format_duration
from ..exceptions import WorkerGaveUp

log = logging.getLogger("jobkit.worker")
FIRST_DELAY, MAX_DELAY = 0.5, 30.0  # seconds before a restart, doubling
STABLE = 30.0  # a run at least this long ends a series of failures


@dataclass
class TaskState:
    """One supervised task: ``running``, ``restarting: <why>``, ``failed: <why>``, ``stopped``, or
    ``idle`` before it first starts."""

    name: str
    state: str = "idle"
    restarts: int = 0

    @property
    def down(self) -> bool:
        return self.state.startswith(("restarting", "failed"))


async def supervise(state: TaskState, run: Callable[[], Awaitable[object]], *,
                    give_up: float = float("inf"), first_delay: float = FIRST_DELAY) -> None:
    """Run ``run()`` until cancelled, restarting it with backoff whenever it ends."""
    loop = asyncio.get_running_loop()
    delay = first_delay
    failing_since: float | None = None
    while True:
        started = loop.time()
        state.state = "running"
        try:
            await run()
            why = "it ended"
            log.error("worker task %s ended by itself; restarting it in %.1fs", state.name, delay)
        except asyncio.CancelledError:
            state.state = "stopped"
            raise
        except WorkerGaveUp as exc:
            state.state = f"failed: {exc.message}"
            raise
        except Exception as exc:  # noqa: BLE001 - whatever ended it, the task starts again
            why = f"{type(exc).__name__}: {exc}"
            log.error("worker task %s failed; restarting it in %.1fs", state.name, delay, exc_info=exc)
        now = loop.time()
        if now - started >= STABLE:
            failing_since, delay = None, first_delay
        failing_since = now if failing_since is None else failing_since
        if now - failing_since >= give_up:
            state.state = f"failed: {why}"
            raise WorkerGaveUp(f"worker task {state.name} kept failing for "
                               f"{format_duration(timedelta(seconds=give_up))}: {why}")
        state.state = f"restarting: {why}"
        state.restarts += 1
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)

