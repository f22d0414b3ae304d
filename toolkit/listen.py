"""`jobkit worker serve --listen`: for the NOTIFY transport (PostgreSQL without pg_net).

LISTEN on jobkit's channel and drain the notified type with the same Drainer the HTTP endpoint
uses. At start it drains every type that already has due jobs; after that each notification (from
the insert trigger or the cron wake-up) starts a drain of its type unless one is running, in which
case that drain goes round once more. Needs a session connection: not Supavisor's transaction
pooler.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

from .backends.postgres import PostgresBackend
from .drain import Drainer

log = logging.getLogger("jobkit.worker")


class Listener:
    """Drains on notifications until stopped."""

    def __init__(self, drainer: Drainer, backend: PostgresBackend, channel: str,
                 budget: timedelta = timedelta(minutes=5)) -> None:
        self.drainer = drainer
        self.backend = backend
        self.channel = channel
        self.budget = budget
        self._active: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    async def run(self) -> None:
        notes = self.backend.pool.notifications(self.channel)
        first = asyncio.ensure_future(anext(notes))  # LISTEN is in place before the catch-up
        await asyncio.sleep(0)
        for job_type in await self.backend.due_types():
            self.poke(job_type)
        pending: asyncio.Future[tuple[str, str]] = first
        while not self.drainer.stopping:
            _channel, payload = await pending
            self.poke(_type_of(payload))
            pending = asyncio.ensure_future(anext(notes))

    def poke(self, job_type: str | None) -> None:
        if not job_type or self.drainer.stopping:
            return
        if job_type in self._active:
            self._again.add(job_type)
            return
        self._active[job_type] = asyncio.create_task(self._drain(job_type))

    async def _drain(self, job_type: str) -> None:
        try:
            while True:
                self._again.discard(job_type)
                summary = await self.drainer.drain(job_type, budget=self.budget)
                log.info("drained %s: %s", job_type, summary.as_dict())
                if job_type not in self._again or self.drainer.stopping:
                    return
        except Exception:  # noqa: BLE001 - keep listening; the next notification retries
            log.exception("drain of %s failed", job_type)
        finally:
            self._active.pop(job_type, None)

    async def wait_idle(self, timeout: float) -> None:
        if self._active:
            await asyncio.wait(list(self._active.values()), timeout=timeout)


def _type_of(payload: str) -> str | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    value = data.get("type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None
