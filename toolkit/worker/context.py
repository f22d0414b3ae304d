"""JobContext: what a handler knows about its job, and what it can ask of jobkit.

``progress()`` only keeps the latest report in memory (the worker writes it, throttled: see
worker/progress.py), so it costs nothing to call in a loop. ``heartbeat()`` and ``acquire()`` work
from both kinds of handler: in an async handler they return
an awaitable (``await ctx.heartbeat()``); in a sync handler, which runs in a worker thread, they
block and return the result (``ctx.heartbeat()``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from ..exceptions import ConfigError
from ..jobs import Claimed, Gathered, WaitSpec, gathered
from ..retries import RateLimited
from .backends import Backend
from .durable import StepPolicy, Steps
from .progress import Reported, progress_json
from .waits import Duration, EventSpec, Suspend, delay_of, event_spec, job_ids_of, outcome, until_of

T = TypeVar("T")
log = logging.getLogger("jobkit.job")


class Holder(Protocol):
    """What keeps a running job's progress (drain's Running): tending writes it from there."""

    reported: Reported | None


class _Kept:
    reported: Reported | None = None


class JobContext:
    """Handed to every handler as its second argument."""

    __slots__ = ("job", "_backend", "_loop", "_lease", "_deadline", "lost", "cancelled", "_logger",
                 "_reported", "_steps", "_shows_steps")

    def __init__(self, job: Claimed, *, backend: Backend, loop: asyncio.AbstractEventLoop,
                 lease: timedelta, deadline: float, holder: Holder | None = None,
                 shows_steps: bool = False) -> None:
        self.job = job
        self._backend = backend
        self._loop = loop
        self._lease = lease
        self._deadline = deadline  # loop.time() after which the attempt is abandoned
        self.lost = False  # set when a heartbeat finds the job no longer ours
        #: set (within about a second) when the job is cancelled while it runs: stop, and return
        #: or raise (nothing is stored). An async handler's task is also cancelled.
        self.cancelled = False
        self._logger: logging.LoggerAdapter[logging.Logger] | None = None
        self._reported = holder  # where the first progress report goes (drain's Running)
        self._steps: Steps | None = None  # durable steps, made at the first ctx.step
        self._shows_steps = shows_steps  # its type is open to end users: its progress names its step

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry job_id, job_type and attempt."""
        if self._logger is None:
            self._logger = logging.LoggerAdapter(
                log, {"job_id": str(self.job.id), "job_type": self.job.type, "attempt": self.job.attempts})
        return self._logger

    @property
    def id(self) -> UUID:
        return self.job.id

    @property
    def type(self) -> str:
        return self.job.type

    @property
    def attempt(self) -> int:
        """1 on the first try (snoozes do not count)."""
        return self.job.attempts

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts

    @property
    def idempotency_key(self) -> str | None:
        return self.job.idempotency_key

    @property
    def payload(self) -> Any:
        return self.job.payload

    def progress(self, amount: float | tuple[int, int] | None, message: str | None = None,
                 data: Any = None) -> None:
        """Report progress: a fraction from 0 to 1 or ``(done, total)``, an optional message and any
        JSON ``data``. Stored on the job (``jobs.progress``) at most a few times a second and once
        more when the attempt ends; shown by `jobkit jobs show` and to ``jobkit.wait(on_progress=)``."""
        self._box().report(progress_json(amount, message, data))

    def _box(self) -> Reported:
        holder = self._reported
        if holder is None:  # a context made outside a worker (tests): keep it here
            holder = self._reported = _Kept()
        if holder.reported is None:
            holder.reported = Reported()
        return holder.reported

    def _step_started(self, name: str, started: datetime) -> None:
        """A durable step starts (a type open to end users only): the next progress write names it."""
        self._box().start_step(name, started)

    @property
    def reported(self) -> dict[str, Any] | None:
        """The latest progress this attempt reported (None: none)."""
        holder = self._reported
        return None if holder is None or holder.reported is None else holder.reported.value

    def heartbeat(self, by: timedelta | None = None) -> Any:
        """Extend this attempt's lease (default: by the full lease). False: the job is no longer
        ours (its lease expired and it was swept or re-claimed): stop working on it."""
        return self._dual(lambda: self._heartbeat(by or self._lease))

    def acquire(self, key: str, n: int = 1) -> Any:
        """Take ``n`` tokens from the rate limit ``key`` shared by every worker, waiting for them
        while this attempt has time left; raises RateLimited (the job is snoozed) otherwise."""
        return self._dual(lambda: self._acquire(key, n))

    def step(self, name: str, fn: Callable[..., Any], *args: Any, retries: int = 0,
             backoff: float | timedelta = 1.0, timeout: float | timedelta | None = None,
             **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as the durable step ``name``: its result (JSON) is stored
        when it returns, and on a retry of the job this returns the stored result without running
        it again. Call it the same way as the handler's other dual calls: ``await ctx.step(...)``
        in an async handler (``fn`` may be async), ``ctx.step(...)`` in a sync one. ``retries``:
        tries after the first within this attempt, ``backoff`` seconds apart (doubled each time);
        ``timeout``: seconds per try (a sync ``fn`` in an async handler then runs in a thread, left
        running when the timeout passes; without a timeout it runs on the event loop, like any sync
        code of the handler). A step that still raises is recorded as failed (its error
        kept) and its exception ends the attempt as usual. At-least-once: see ``step_key``."""
        policy = StepPolicy.of(retries, backoff, timeout)
        steps = self._durable()
        n = steps.next(name)
        call = _bound(fn, args, kwargs)
        if _in_loop_thread(self._loop):
            if policy.timeout is not None and not inspect.iscoroutinefunction(fn):
                call = _threaded(fn, args, kwargs)  # a timeout cannot interrupt a sync call on the loop
            return steps.run_async(self, name, n, call, policy)
        return steps.run_sync(self, name, n, call, policy)

    def step_key(self, name: str) -> str:
        """A stable idempotency key for the step ``name`` (job id, name and occurrence): the one
        running now, else its next occurrence. The same on every attempt: hand it to an outside
        API (Stripe's Idempotency-Key) so that a step run again after a crash is not done twice."""
        return self._durable().key(name)

    async def transaction_step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``await fn(conn, *args, **kwargs)`` as the durable step ``name`` inside one
        transaction on a connection of the worker's own pool (``conn``: a psycopg AsyncConnection),
        its record committed in the same transaction: the work is done exactly once. Async
        handlers on the direct PostgreSQL backend only."""
        if not _in_loop_thread(self._loop):
            raise ConfigError("ctx.transaction_step needs an async handler",
                              hint="make the handler async (async def), or use ctx.step")
        steps = self._durable()
        return await steps.run_transaction(name, steps.next(name), fn, args, kwargs)

    # ---- waits that free the worker (worker/waits.py) --------------------------------------------------

    def sleep(self, duration: Duration, *, name: str = "sleep") -> Any:
        """Sleep ``duration`` ("3d", seconds or a timedelta) without holding a worker: the attempt
        ends here (not consumed), the job waits, and when the time has come its handler replays
        (completed steps return their stored results) and this returns None. ``await`` it in an
        async handler. A wait is a durable step: ``name`` and its occurrence identify it."""
        delay = delay_of(duration, "ctx.sleep")
        return self._wait(name, lambda n: WaitSpec(name, n, "sleep", delay=delay))

    def sleep_until(self, when: datetime, *, name: str = "sleep") -> Any:
        """Like ``sleep``, until the aware datetime ``when``."""
        due = until_of(when)
        return self._wait(name, lambda n: WaitSpec(name, n, "sleep", due=due))

    @staticmethod
    def event(name: str, key: str | int | None = None) -> EventSpec:
        """An event to wait for with ``wait_any``."""
        return event_spec(name, key)

    def wait_for_event(self, event: str, *, key: str | int | None = None,
                       timeout: Duration | None = None, name: str | None = None) -> Any:
        """Wait, holding no worker, for the event ``event`` with ``key`` (jobkit.emit): returns the
        :class:`~jobkit.worker.waits.Event` (its ``data``), or None when ``timeout`` passed first.
        An event emitted after the job was enqueued and before this wait still counts (latch);
        each event is returned once per job."""
        spec = event_spec(event, key)
        return self.wait_any(spec, timeout=timeout, name=name or f"event:{event}"[:200])

    def wait_any(self, *events: EventSpec | str, timeout: Duration | None = None,
                 name: str = "wait_any") -> Any:
        """Wait for whichever of ``events`` (``ctx.event(name, key=...)`` or names) comes first:
        the :class:`~jobkit.worker.waits.Event`, or None when ``timeout`` passed first."""
        specs = [e if isinstance(e, EventSpec) else event_spec(e) for e in events]
        if not specs:
            raise ConfigError("ctx.wait_any needs at least one event",
                              hint='ctx.wait_any(ctx.event("order.shipped", key=order_id), timeout="3d")')
        delay = None if timeout is None else delay_of(timeout, "timeout")
        return self._wait(name, lambda n: WaitSpec(name, n, "event", delay=delay,
                                                   events=tuple(s.name for s in specs),
                                                   keys=tuple(s.key for s in specs)))

    def wait_for_jobs(self, ids: Iterable[UUID | str], *, timeout: Duration | None = None,
                      name: str = "wait_for_jobs") -> Any:
        """Wait, holding no worker, until all of these jobs have finished (completed, failed,
        dead, cancelled or deleted): returns {job id: its status}, or None when ``timeout`` passed
        first."""
        job_ids = job_ids_of(ids)
        if self.job.id in job_ids:
            raise ConfigError("a job cannot wait for itself", hint="pass the ids of the jobs it started")
        delay = None if timeout is None else delay_of(timeout, "timeout")
        return self._wait(name, lambda n: WaitSpec(name, n, "jobs", delay=delay, job_ids=job_ids))

    def _wait(self, name: str, make: Callable[[int], WaitSpec]) -> Any:
        steps = self._durable()
        spec = make(steps.next(name))
        if _in_loop_thread(self._loop):
            return _waited(steps, spec)
        found, value = steps._wait(steps.stored(spec.step, spec.occurrence))
        if found:
            return outcome(spec.kind, value)
        raise Suspend(spec)

    def parents(self) -> Any:
        """This job's parents in its graph (jobkit.flow), as they ended: a list of
        :class:`jobkit.Parent` (id, type, status, result, error, on_parent_failure); [] for a job
        without parents. ``await ctx.parents()`` in an async handler, ``ctx.parents()`` in a sync one."""
        return self._dual(lambda: self._backend.parents(self.job.id))

    def gathered(self) -> Any:
        """For a :func:`jobkit.gather` callback: the ids of the jobs that succeeded and of those that
        failed or were cancelled (:class:`jobkit.Gathered`, with ``.counts``). Dual, like parents()."""
        async def read() -> Gathered:
            return gathered(await self._backend.parents(self.job.id))
        return self._dual(read)

    def _durable(self) -> Steps:
        if self._steps is None:
            self._steps = Steps(self.job, self._backend, self._loop,
                                on_start=self._step_started if self._shows_steps else None)
        return self._steps

    async def _heartbeat(self, by: timedelta) -> bool:
        kept = await self._backend.extend([(self.job.id, self.job.attempts)], by)
        self.lost = self.job.id not in kept
        return not self.lost

    async def _acquire(self, key: str, n: int) -> None:
        got = 0
        while got < n:
            got += await self._backend.take_tokens(key, n - got)
            if got >= n:
                return
            wait = max(await self._backend.token_wait(key), 0.01)
            if self._loop.time() + wait > self._deadline:
                raise RateLimited(f"rate limit {key!r}: no token before the timeout", retry_after=wait)
            await asyncio.sleep(wait)

    def _dual(self, make: Callable[[], Coroutine[Any, Any, T]]) -> Awaitable[T] | T:
        if _in_loop_thread(self._loop):
            return make()
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result()


async def _waited(steps: Steps, spec: WaitSpec) -> Any:
    found, value = await steps.stored(spec.step, spec.occurrence)
    if found:
        return outcome(spec.kind, value)
    raise Suspend(spec)


def _bound(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    if not callable(fn):
        raise ConfigError(f"a step runs a function, got {fn!r}", hint='call ctx.step("name", fn, *args)')
    return lambda: fn(*args, **kwargs)


def _threaded(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A sync step function with a timeout, in an async handler: each try in a thread (abandoned,
    still running, when the timeout passes)."""
    return lambda: asyncio.to_thread(fn, *args, **kwargs)


def _in_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False

