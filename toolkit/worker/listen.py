"""`jobkit worker serve --listen`: wake-ups over NOTIFY (PostgreSQL without pg_net).

LISTEN on jobkit's channel and hand every notification to the Dispatcher. Each time LISTEN is in
place (at start and after every reconnect) the Dispatcher catches up: it drains every handled type
with due jobs and sets the timers for the next due ones, so nothing that became due while the
connection was down waits for the cron wake-up. A dropped connection is re-opened with backoff; after
``give_up`` of failing, ``run`` raises WorkerGaveUp and the worker exits non-zero. Needs a session
connection: not Supavisor's transaction pooler.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Protocol

from ..durations import format_duration
from ..exceptions import ConnectionFailed, WorkerGaveUp
from .dispatch import Dispatcher

log = logging.getLogger("jobkit.worker")


class Notifications(Protocol):
    """What the Listener needs of a backend: a LISTEN session yielding payloads."""

    def listen(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[str]]: ...


class Listener:
    """Feeds notifications to the Dispatcher until cancelled; reconnects; gives up loudly."""

    def __init__(self, dispatcher: Dispatcher, source: Notifications, channel: str, *,
                 give_up: timedelta = timedelta(minutes=5)) -> None:
        self.dispatcher = dispatcher
        self.source = source
        self.channel = channel
        self.give_up = give_up
        self.state = "starting"  # listening | reconnecting: <why>
        self.listening = asyncio.Event()  # set while LISTEN is in place

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        failing_since: float | None = None
        delay = 0.25
        while True:
            try:
                async with self.source.listen(self.channel) as payloads:
                    self._up()
                    failing_since, delay = None, 0.25
                    await self.dispatcher.catch_up()
                    async for payload in payloads:
                        self._dispatch(payload)
                raise ConnectionFailed("the LISTEN connection ended")
            except ConnectionFailed as exc:
                self.listening.clear()
                now = loop.time()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self.give_up.total_seconds():
                    raise WorkerGaveUp(
                        f"could not listen on {self.channel} for {format_duration(self.give_up)}: "
                        f"{exc.message}") from None
                self.state = f"reconnecting: {exc.message}"
                log.warning("LISTEN %s: %s; reconnecting in %.2fs", self.channel, exc.message, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _up(self) -> None:
        self.state = "listening"
        self.listening.set()
        log.info("listening on %s", self.channel)

    def _dispatch(self, payload: str) -> None:
        job_type, at = _parse(payload)
        if job_type:
            self.dispatcher.wake(job_type, at=at)


def _parse(payload: str) -> tuple[str | None, float | None]:
    try:
        data = json.loads(payload)
    except ValueError:
        return None, None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        return None, None
    at = data.get("at")
    return data["type"], float(at) if isinstance(at, int | float) else None
