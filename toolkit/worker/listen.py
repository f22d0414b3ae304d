"""`jobkit worker serve --listen`: wake-ups over NOTIFY (PostgreSQL without pg_net).

LISTEN on jobkit's channel and hand every notification to the Dispatcher. Any role that can
connect can NOTIFY on that channel, so a payload is data from anyone: ``parse`` never raises, and
what is not a wake-up (not a JSON object, no non-empty ``type``, a bad ``at``, nesting that
exhausts the JSON decoder's recursion, numbers that overflow a float) is ignored and counted
(``invalid``; /healthz and /metrics show it). Each time LISTEN is in place (at start and after
every reconnect) the Dispatcher catches up: it drains every handled type with due jobs and sets
the timers for the next due ones, so nothing that became due while the connection was down waits
for the cron wake-up. A dropped connection is re-opened with backoff; after
``give_up`` of failing, ``run`` raises WorkerGaveUp and the worker exits non-zero. Needs a session
connection: not Supavisor's transaction pooler.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable
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
                 give_up: timedelta = timedelta(minutes=5),
                 on_invalid: Callable[[], None] | None = None) -> None:
        self.dispatcher = dispatcher
        self.source = source
        self.channel = channel
        self.give_up = give_up
        self.state = "starting"  # listening | reconnecting: <why>
        self.listening = asyncio.Event()  # set while LISTEN is in place
        self.invalid = 0  # notifications ignored because they are not wake-ups
        self._on_invalid = on_invalid

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
                        self._handle(payload)
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
            except BaseException as exc:  # a bug, or shutdown: the supervisor restarts it (or not)
                self.listening.clear()
                self.state = f"down: {type(exc).__name__}"
                raise

    def _up(self) -> None:
        self.state = "listening"
        self.listening.set()
        log.info("listening on %s", self.channel)

    def _handle(self, payload: str) -> None:
        try:
            self._dispatch(payload)
        except Exception:  # noqa: BLE001 - a bug of jobkit's must not end LISTEN: log it, go on
            log.exception("LISTEN %s: handling a notification failed (%r)", self.channel, payload[:80])

    def _dispatch(self, payload: str) -> None:
        wake = parse(payload)
        if wake is None:
            self.invalid += 1
            if self._on_invalid is not None:
                self._on_invalid()
            if self.invalid in _LOGGED or self.invalid % 1000 == 0:  # a flood writes a few lines
                log.warning("LISTEN %s: ignored %d notification(s) that are not wake-ups (latest: %r)",
                            self.channel, self.invalid, payload[:80])
            return
        job_type, at = wake
        if at is not None and job_type not in self.dispatcher.handled:
            return  # no timer for a type this worker does not handle (anyone can NOTIFY)
        self.dispatcher.wake(job_type, at=at)


_LOGGED = {1, 10, 100}
MAX_AT = 1e11  # a Unix time in seconds (year 5138): the /run body's bound
MAX_TYPE = 1000  # characters of a job type in a wake-up (the channel carries 8000 bytes at most)


def parse(payload: object) -> tuple[str, float | None] | None:
    """A wake-up's (type, at), or None when ``payload`` is not one. Never raises."""
    try:
        data = json.loads(payload) if isinstance(payload, str | bytes) else None
    except (ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(data, dict):
        return None
    job_type, at = data.get("type"), data.get("at")
    if not isinstance(job_type, str) or not job_type or len(job_type) > MAX_TYPE:
        return None
    if at is None:
        return job_type, None
    if isinstance(at, bool) or not isinstance(at, int | float):
        return None
    try:
        when = float(at)
    except OverflowError:  # an integer beyond float
        return None
    if not math.isfinite(when) or not 0 <= when < MAX_AT:
        return None
    return job_type, when

