"""Worker presence: each worker process keeps a row of the workers table fresh (0021).

A :class:`Presence` writes one small upsert every ``heartbeat`` seconds (``worker_beat``: its id,
host, pid, version, transport, concurrency, the types it serves, the jobs it holds now), on a task
of its own and on the backend's pool: nothing on the claim or completion paths waits for it. The
first beat registers the worker; a clean shutdown marks its row gone (``worker_gone``); the stuck
sweep marks gone the workers that missed three heartbeats (sweep_workers, sql/functions/75_workers.sql).

A failed beat (the database unreachable, a timeout) is logged, at most once a minute, and tried
again at the next beat: presence never stops the worker, and the worker's own database watch
(endpoint.py) decides alone when to give up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ..durations import format_duration, parse_duration
from ..exceptions import ConfigError, JobkitError
from ..jobs import WorkerInfo
from ..logthrottle import install
from ..version import __version__
from .backends import Backend

log = logging.getLogger("jobkit.worker.presence")
install(log, burst=1, interval=60.0)  # one line a minute per kind while the database is away

HEARTBEAT = timedelta(seconds=5)  # the default: how often a worker writes its row
MIN_HEARTBEAT = timedelta(seconds=1)
MAX_HEARTBEAT = timedelta(minutes=1)
LEAVE_TIMEOUT = 3.0  # seconds the shutdown's mark may take


def parse_heartbeat(text: str) -> timedelta | None:
    """``--heartbeat``: a duration from 1s to 1m, or "off" (None: no presence); else a ConfigError."""
    if text.strip().lower() == "off":
        return None
    every = parse_duration(text, what="--heartbeat")
    if not MIN_HEARTBEAT <= every <= MAX_HEARTBEAT:
        raise ConfigError(f"--heartbeat must be from 1s to 1m (or off), not {format_duration(every)}",
                          hint="e.g. --heartbeat 5s")
    return every


def describe(worker_id: str, *, transport: str, concurrency: int, types: list[str],
             heartbeat: timedelta) -> WorkerInfo:
    """This process as the workers table records it."""
    return WorkerInfo(id=worker_id, host=socket.gethostname(), pid=os.getpid(), version=__version__,
                      transport=transport, concurrency=concurrency, types=tuple(types),
                      heartbeat=heartbeat, started_at=datetime.now(UTC))


class Presence:
    """``run()`` beats until cancelled; ``leave()`` marks the worker gone."""

    def __init__(self, backend: Backend, info: WorkerInfo, running: Callable[[], int]) -> None:
        self.backend = backend
        self.info = info
        self.running = running
        self.beats = 0  # heartbeats written
        self.missed = 0  # heartbeats that failed since the last one written

    @property
    def every(self) -> float:
        return self.info.heartbeat.total_seconds()

    async def run(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.every)

    async def beat(self) -> bool:
        """Write one heartbeat (bounded by the interval); False when it failed (logged, throttled)."""
        try:
            async with asyncio.timeout(self.every):
                await self.backend.worker_beat(self.info, self.running())
        except (JobkitError, TimeoutError) as exc:
            self.missed += 1
            why = getattr(exc, "message", None) or f"no answer within {self.every:g}s"
            log.warning("worker heartbeat failed (retried every %gs): %s", self.every, why)
            return False
        except Exception as exc:  # noqa: BLE001 - presence never stops the worker
            self.missed += 1
            log.error("worker heartbeat failed: %s: %s", type(exc).__name__, exc)
            return False
        if self.missed:
            log.info("worker heartbeat written again after %d failed", self.missed)
        self.beats, self.missed = self.beats + 1, 0
        return True

    async def leave(self) -> None:
        """Mark this worker gone (a clean shutdown); a failure is only logged: the sweep marks
        it gone after its missed heartbeats."""
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT):
                await self.backend.worker_gone(self.info.id)
        except (JobkitError, TimeoutError) as exc:
            log.warning("could not mark this worker gone (the sweep will): %s",
                        getattr(exc, "message", None) or f"no answer within {LEAVE_TIMEOUT:g}s")
