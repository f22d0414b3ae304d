"""Durable steps (issue 25): ``ctx.step``, ``ctx.step_key`` and ``ctx.transaction_step``.

A step is named; its occurrence is the n-th call of that name within one execution of the handler
(assigned when ``ctx.step`` is called, so it is the same on every execution of deterministic code).
Its result is stored as JSON, one row per (job, name, occurrence) in ``job_steps``, written fenced by
the attempt (``save_steps``): a stale attempt (its job's attempts counter moved on, or the job was
swept, cancelled or deleted) writes nothing and gets StepLost, which ends it like a fenced
completion (the worker counts it lost). A later attempt reads the completed steps once, at its
first step (``load_steps``), and returns their stored results without running them. A job whose
handler never calls ctx.step costs nothing: no statement on claim or completion.

The contract: a step's side effects outside the database are at-least-once (a kill after the step
ran but before its record was written runs it again: pass ``ctx.step_key(name)`` to the outside API
as its idempotency key); a transactional step's database work is exactly-once (its record commits in
the same transaction, on a connection of the worker's own pool).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ..exceptions import ConfigError, JobkitError
from ..jobs import Claimed, StepRecord
from ..retries import Permanent
from .backends import Backend
from .groupcommit import GroupCommit
from .outcomes import encode_result, error_text

log = logging.getLogger("jobkit.job")
MAX_BACKOFF = 300.0  # seconds: the longest pause between two tries of a step


class StepLost(JobkitError):
    """This attempt no longer holds its job: a step's record was refused (fenced)."""

    default_hint = ("the job's lease expired or it was cancelled while this attempt ran: stop; "
                    "another attempt runs it (heartbeat long steps, or raise the type's lease)")


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """A step's own retries (tries after the first), the pause before the first of them (doubled
    after each), and its timeout per try (None: none)."""

    retries: int = 0
    backoff: float = 1.0
    timeout: float | None = None

    @classmethod
    def of(cls, retries: int, backoff: float | timedelta, timeout: float | timedelta | None) -> StepPolicy:
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
            raise ConfigError(f"a step's retries must be an integer from 0 to 100, got {retries!r}",
                              hint='call ctx.step("name", fn, retries=3)')
        pause = _seconds(backoff, "backoff")
        limit = None if timeout is None else _seconds(timeout, "timeout")
        if limit is not None and limit <= 0:
            raise ConfigError(f"a step's timeout must be positive, got {timeout!r}",
                              hint='call ctx.step("name", fn, timeout=30) (seconds or a timedelta)')
        return cls(retries, pause, limit)

    def delay(self, tried: int) -> float:
        """The pause after ``tried`` failed tries."""
        return min(self.backoff * 2.0 ** min(tried - 1, 30), MAX_BACKOFF)


def _seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < 86400:
        raise ConfigError(f"a step's {what} must be seconds (or a timedelta) from 0 to a day, got {value!r}",
                          hint=f'call ctx.step("name", fn, {what}=2.0)')
    return float(seconds)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ConfigError(f"a step's name must be a string of 1 to 200 characters, got {name!r}",
                          hint='call ctx.step("charge", fn)')
    return name


Done = dict[tuple[str, int], Any]


class StepStore:
    """A worker's step reads and writes, group-committed: the first steps of the jobs that start
    together are read in one statement, and the records of steps that end together are written in
    one (the completions' GroupCommit), so a step costs a share of a statement, not one of its own."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._loader: GroupCommit[tuple[UUID, asyncio.Future[Done]], dict[tuple[UUID, str, int], Any]] = \
            GroupCommit(self._load, self._loaded)
        self._saver: GroupCommit[tuple[StepRecord, asyncio.Future[bool]], set[tuple[UUID, int]]] = \
            GroupCommit(self._save, self._saved)

    async def load(self, job_id: UUID) -> Done:
        """The job's completed steps: (name, occurrence) -> result."""
        future: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
        self._loader.submit((job_id, future))
        return await future

    async def save(self, record: StepRecord) -> bool:
        """Write one record; False when its attempt no longer holds its job (fenced)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._saver.submit((record, future))
        return await future

    async def _load(self, batch: list[tuple[UUID, asyncio.Future[Done]]]) -> dict[tuple[UUID, str, int], Any]:
        return await self.backend.load_steps(list(dict.fromkeys(job_id for job_id, _f in batch)))

    @staticmethod
    def _loaded(batch: list[tuple[UUID, asyncio.Future[Done]]],
                result: dict[tuple[UUID, str, int], Any] | None, error: BaseException | None) -> None:
        by_job: dict[UUID, Done] = {}
        for (job_id, name, n), value in (result or {}).items():
            by_job.setdefault(job_id, {})[(name, n)] = value
        for job_id, future in batch:
            if not future.done():
                _settle(future, by_job.get(job_id, {}), error)

    async def _save(self, batch: list[tuple[StepRecord, asyncio.Future[bool]]]) -> set[tuple[UUID, int]]:
        return await self.backend.save_steps([record for record, _f in batch])

    @staticmethod
    def _saved(batch: list[tuple[StepRecord, asyncio.Future[bool]]], result: set[tuple[UUID, int]] | None,
               error: BaseException | None) -> None:
        for record, future in batch:
            if not future.done():
                _settle(future, (record.job_id, record.attempt) in (result or set()), error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


_stores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, StepStore]] = \
    weakref.WeakKeyDictionary()


def store_for(backend: Backend, loop: asyncio.AbstractEventLoop) -> StepStore:
    """The StepStore of ``backend`` in ``loop`` (one per worker: its statements group jobs' steps)."""
    stores = _stores.setdefault(loop, {})
    found = stores.get(id(backend))
    if found is None or found.backend is not backend:
        found = stores[id(backend)] = StepStore(backend)
    return found


@dataclass
class Steps:
    """One execution's durable steps: which occurrence each name is at, and the completed ones."""

    job: Claimed
    backend: Backend
    loop: asyncio.AbstractEventLoop
    done: Done | None = None  # read at the first step
    counts: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # name -> its occurrence running now
    on_start: Callable[[str, datetime], None] | None = None  # told when a step starts (user API types)

    def next(self, name: str) -> int:
        """Assign the next occurrence of ``name`` (called when ctx.step is called)."""
        n = self.counts.get(check_name(name), 0) + 1
        self.counts[name] = n
        return n

    def begin(self, name: str, n: int) -> datetime:
        """A step that was not stored starts running: its start time (and on_start is told)."""
        started = datetime.now(UTC)
        self.running[name] = n
        if self.on_start is not None:
            self.on_start(name, started)
        return started

    def key(self, name: str) -> str:
        """The idempotency key of the step ``name`` running now, else of its next occurrence."""
        n = self.running.get(check_name(name), self.counts.get(name, 0) + 1)
        return step_key(self.job.id, name, n)

    @property
    def store(self) -> StepStore:
        return store_for(self.backend, self.loop)

    async def stored(self, name: str, n: int) -> tuple[bool, Any]:
        if self.done is None:
            self.done = await self.store.load(self.job.id)
        key = (name, n)
        return (key in self.done, self.done.get(key))

    def record(self, name: str, n: int, started: datetime, tries: int, *, result: str | None = None,
               error: BaseException | None = None) -> StepRecord:
        return StepRecord(self.job.id, self.job.attempts, name, n, result,
                          None if error is None else error_text(error), tries, started)

    async def save(self, record: StepRecord) -> None:
        """Write a completed step's record; StepLost when the attempt no longer holds the job."""
        if not await self.store.save(record):
            raise StepLost(f"step {record.name!r} of job {record.job_id}: attempt {record.attempt} no "
                           "longer holds the job; its result was not stored")
        if record.error is None and self.done is not None:
            self.done[(record.name, record.occurrence)] = _decoded(record.result)

    async def save_failure(self, record: StepRecord) -> None:
        """Keep a failed step's error (for debugging); a failure to keep it is only logged."""
        try:
            await self.store.save(record)
        except JobkitError as exc:
            log.warning("job %s: could not record the error of step %r: %s", record.job_id, record.name, exc)

    # ---- running a step: in the event loop (async handlers) or in a worker thread (sync ones) ----

    async def run_async(self, ctx: Any, name: str, n: int, call: Callable[[], Any],
                        policy: StepPolicy) -> Any:
        found, value = await self.stored(name, n)
        if found:
            return value
        started, tries = self.begin(name, n), 0
        try:
            while True:
                tries += 1
                try:
                    text = encode_result(await _attempt_async(call, policy.timeout))
                    break
                except Exception as exc:
                    if not _again(exc, tries, policy, ctx, self.loop):
                        await self.save_failure(self.record(name, n, started, tries, error=exc))
                        raise
                    await asyncio.sleep(policy.delay(tries))
        finally:
            self.running.pop(name, None)
        try:
            await self.save(self.record(name, n, started, tries, result=text))
        except StepLost:
            ctx.lost = True
            raise
        return _decoded(text)

    def run_sync(self, ctx: Any, name: str, n: int, call: Callable[[], Any], policy: StepPolicy) -> Any:
        found, value = self._wait(self.stored(name, n))
        if found:
            return value
        started, tries = self.begin(name, n), 0
        try:
            while True:
                tries += 1
                try:
                    text = encode_result(_attempt_sync(call, policy.timeout))
                    break
                except Exception as exc:
                    if not _again(exc, tries, policy, ctx, self.loop):
                        self._wait(self.save_failure(self.record(name, n, started, tries, error=exc)))
                        raise
                    time.sleep(policy.delay(tries))
        finally:
            self.running.pop(name, None)
        try:
            self._wait(self.save(self.record(name, n, started, tries, result=text)))
        except StepLost:
            ctx.lost = True
            raise
        return _decoded(text)

    async def run_transaction(self, name: str, n: int, fn: Callable[..., Any], args: tuple[Any, ...],
                              kwargs: dict[str, Any]) -> Any:
        """``fn(conn, *args, **kwargs)`` and the step's record in one transaction on a connection of
        the worker's pool: both commit, or neither (exactly-once for database work)."""
        pool = getattr(self.backend, "pool", None)
        transaction = getattr(pool, "transaction", None)
        statements = getattr(self.backend, "sql", None)
        if transaction is None or statements is None:
            raise ConfigError(f"ctx.transaction_step needs the direct PostgreSQL backend; this worker uses "
                              f"{type(self.backend).__name__}",
                              hint="run the worker with a database URL, or use ctx.step (at-least-once)")
        found, value = await self.stored(name, n)
        if found:
            return value
        from ..connector.aio import AsyncSession

        started = self.begin(name, n)
        try:
            async with transaction() as conn:
                text = encode_result(await _awaited(lambda: fn(conn, *args, **kwargs)))
                record = self.record(name, n, started, 1, result=text)
                held = await AsyncSession(conn).run(statements.save_steps([record], hold=True))
                if (record.job_id, record.attempt) not in held:
                    raise StepLost(f"transactional step {name!r} of job {self.job.id}: attempt "
                                   f"{self.job.attempts} no longer holds the job; its work was rolled back")
        except Exception as exc:
            if not isinstance(exc, StepLost):
                await self.save_failure(self.record(name, n, started, 1, error=exc))
            raise
        finally:
            self.running.pop(name, None)
        if self.done is not None:
            self.done[(name, n)] = _decoded(text)
        return _decoded(text)

    def _wait(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()


def step_key(job_id: UUID, name: str, occurrence: int) -> str:
    """A stable idempotency key for one step of one job (the same on every attempt)."""
    return f"jobkit:{job_id}:{name}:{occurrence}"


def _again(exc: Exception, tries: int, policy: StepPolicy, ctx: Any, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a step that raised ``exc`` on try ``tries`` gets another try in this attempt."""
    if isinstance(exc, Permanent | StepLost | ConfigError) or tries > policy.retries:
        return False
    if ctx.cancelled or ctx.lost:
        return False
    return bool(loop.time() + policy.delay(tries) < ctx._deadline)  # no try past the attempt's timeout


async def _attempt_async(call: Callable[[], Any], timeout: float | None) -> Any:
    if timeout is None:
        value = call()
        return await value if inspect.isawaitable(value) else value
    return await asyncio.wait_for(_awaited(call), timeout)


async def _awaited(call: Callable[[], Any]) -> Any:
    value = call()
    return await value if inspect.isawaitable(value) else value


def _attempt_sync(call: Callable[[], Any], timeout: float | None) -> Any:
    if timeout is None:
        return _checked_sync(call())
    # The try runs in a thread of its own, abandoned at the timeout (a thread cannot be stopped).
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobkit-step")
    try:
        return _checked_sync(pool.submit(call).result(timeout))
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"step timed out after {timeout:g}s") from None
    finally:
        pool.shutdown(wait=False)


def _checked_sync(value: Any) -> Any:
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        raise ConfigError("a sync handler's step returned an awaitable",
                          hint="make the handler async (async def) to run async step functions")
    return value


def _decoded(text: str | None) -> Any:
    """The result as the store gives it back (a retry returns the same)."""
    return None if text is None else json.loads(text)
