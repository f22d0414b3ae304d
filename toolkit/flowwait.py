"""One wait on a flow (``jobkit.wait(target, run)``, ``jobkit.wait_flow``): toolkit/results.py
opens the connection and hands over how to read the flow, how to register its jobs and where
notifications arrive; this module keeps the deadline, the backoff and what is still open.

A read (``flow_state``) lists the flow's jobs with their statuses (their results only once every
job ended). When listening, every job not ended is registered with ``wait_on`` (0014), so the
statement that ends it notifies ``<schema>_done``; each notification crosses its jobs off, and the
flow is read again when none is left open (or at the backoff's next re-read, at most
``LISTENING_POLL`` apart: a lost notification, or a job added to the flow later, only costs time).
A job that ended between the read and its registration sent nothing: the flow is read again at
once after registering. Without notifications the flow is read every ``poll`` seconds at most."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

from .exceptions import ConfigError, NotFound, WaitTimeout
from .jobs import FlowResult, JobResult

FIRST_POLL = 0.05  # seconds before the first re-read; doubled after each one up to the cap
LISTENING_POLL = 5.0  # the re-read cap while notifications can arrive

Read = Callable[[], list[JobResult]]
Register = Callable[[list[UUID]], Any]
Notes = Callable[[float], list[tuple[str, str]]]


class FlowWatch:
    """One wait on a flow: its deadline, the backoff between reads, the jobs still open."""

    def __init__(self, flow: UUID, timeout: float, poll: float) -> None:
        if timeout < 0 or poll <= 0:
            raise ConfigError(f"timeout must be >= 0 and poll > 0, got timeout={timeout}, poll={poll}")
        self.flow = flow
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.poll = poll
        self.pause = FIRST_POLL
        self.reads = 0  # how often the flow was read (tests check notifications saved reads)
        self.open: set[UUID] = set()  # jobs not ended at the last read, and not notified since
        self.registered: set[UUID] = set()

    def sync(self, read: Read, register: Register | None, notes: Notes | None) -> FlowResult:
        while True:
            self.reads += 1
            fresh = self.check(read())
            if isinstance(fresh, FlowResult):
                return fresh
            if fresh and register is not None:
                register(fresh)
                self.registered.update(fresh)
                continue  # read again: a job that ended before its registration notified no one
            wait_for = self.next_pause(notes is not None)
            if notes is None:
                time.sleep(wait_for)
                continue
            until = time.monotonic() + wait_for
            while (left := until - time.monotonic()) > 0:
                if self.heard(payload for _channel, payload in notes(left)):
                    break

    async def aio(self, read: Callable[[], Awaitable[list[JobResult]]],
                  register: Callable[[list[UUID]], Awaitable[Any]] | None,
                  notes: Callable[[float], Awaitable[list[str]]] | None) -> FlowResult:
        while True:
            self.reads += 1
            fresh = self.check(await read())
            if isinstance(fresh, FlowResult):
                return fresh
            if fresh and register is not None:
                await register(fresh)
                self.registered.update(fresh)
                continue
            wait_for = self.next_pause(notes is not None)
            if notes is None:
                await asyncio.sleep(wait_for)
                continue
            until = time.monotonic() + wait_for
            while (left := until - time.monotonic()) > 0:
                if self.heard(await notes(left)):
                    break

    def check(self, jobs: Sequence[JobResult]) -> FlowResult | list[UUID]:
        """The FlowResult when every job ended; else the open jobs not registered yet. Raises
        NotFound for a flow without jobs and WaitTimeout when time is up."""
        if not jobs:
            raise NotFound(f"no flow {self.flow}: no job has that flow id",
                           hint="pass the FlowRun jobkit.flow() returned (or its .id); a flow's jobs "
                                "are pruned some time after they end")
        still = {j.id: j.status.value for j in jobs if not j.finished}
        if not still:
            return FlowResult(self.flow, list(jobs))
        self.open = set(still)
        if time.monotonic() >= self.deadline:
            counts = ", ".join(f"{n} {status}" for status, n in sorted(Counter(still.values()).items()))
            raise WaitTimeout(f"flow {self.flow} did not finish within {self.timeout:g}s "
                              f"({len(still)} of {len(jobs)} jobs not ended: {counts})",
                              hint="wait longer (timeout=...), or look at it with "
                                   f"`jobkit flows show {self.flow}`",
                              flow_id=self.flow, open_jobs=still)
        return [i for i in still if i not in self.registered]

    def heard(self, payloads: Any) -> bool:
        """Cross off the jobs these notifications name; True when none is left open."""
        for payload in payloads:
            for text in payload.split(","):
                try:
                    self.open.discard(UUID(text))
                except ValueError:
                    continue
        return not self.open

    def next_pause(self, listening: bool) -> float:
        cap = LISTENING_POLL if listening else self.poll
        pause, self.pause = min(self.pause, cap), min(self.pause * 2, cap)
        return max(0.0, min(pause, self.deadline - time.monotonic()))


def flow_id(flow: Any) -> UUID:
    """The id of a FlowRun, or a flow id given as a UUID or its text."""
    found = getattr(flow, "id", flow)
    try:
        return found if isinstance(found, UUID) else UUID(str(found))
    except ValueError:
        raise ConfigError(f"not a flow id: {flow!r}",
                          hint="pass the FlowRun jobkit.flow() returned, or its .id") from None
