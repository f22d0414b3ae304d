"""Draining: claim in batches, run handlers with bounded concurrency, finish in fenced batches.

One Drainer serves a worker process. ``drain(type)`` keeps claiming until the type has no due job
(and, with ``linger``, none came during a short wait), the budget is spent or ``max_jobs`` were
claimed. Concurrent drains share the Drainer's slots and its claim window: a claim reserves its
room before it is sent, so no number of concurrent drains holds more than the window. Outcomes go
to group commits (recording.py); a tending task extends leases and abandons handlers past their
timeout (tending.py); ``shutdown`` stops claiming, lets running jobs finish within a grace period
and releases the rest without consuming their attempt, each only once its handler can no longer
be running (a sync handler's thread: when the process exits).

A handler ends only its own attempt, whatever it raises: an Exception, SystemExit,
KeyboardInterrupt, GeneratorExit or a CancelledError of its own. A lost database connection is
waited out (with backoff, within the budget) instead of ending the drain.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from .. import tracing
from ..exceptions import ConnectionFailed, JobkitError
from ..jobs import Claimed
from .attempt import RETURNED_NONE, Ended, Interrupt, Outcome, Phase, Raised, Returned, settle, stronger
from .backends import Backend
from .context import JobContext
from .handler import Handler, Handlers
from .metrics import Observer, Quiet
from .outcomes import DrainSummary, encode_result
from .recording import DrainState, Recorder, Running
from .supervise import TaskState
from .tending import Tending
from .window import ClaimWindow

log = logging.getLogger("jobkit.worker")
LINGER_FIRST, LINGER_MAX = 0.005, 0.05  # seconds between re-checks while lingering
CANCEL_WAIT = 5.0  # seconds a cancelled async handler gets to end at shutdown
#: claimers=None: a second claim loop when the database's round trip is at least this share of a
#: full claim's time (the round trip at least half the claim's time in the server)
ROUND_TRIP_SHARE = 1 / 3
PINGS = 3  # a drain's round trip: the fastest of this many pings at its first full claim
RUNNING = Phase.RUNNING  # per job: an enum class attribute read goes through EnumType.__getattr__'s hook


class Drainer:
    """Runs jobs for one worker process.

    ``concurrency`` slots are shared by every drain. A slot is held by a runner coroutine that takes
    claimed jobs off its drain's queue one after the other, so a job costs no task of its own; the
    outcome goes to a group commit without waiting for it, and the job leaves the claim window when
    its statement returns. A drain whose claims come back full gets up to ``claimers`` claim loops,
    so the next claim is already on its way while one returns: their claims share the window and
    ``max_jobs`` (none claims beyond either). A trickle of jobs keeps one loop, so one claim per
    wake-up.

    By default (``claimers=None``) a drain keeps one claim loop unless the database is far away:
    at its first full claim it sends three pings, and a second loop starts when the fastest one's
    round trip is at least a third of a full claim's time. Two claims in flight at once overlap in
    the server: a plain type's claim walks the rows the other holds (skip locked), and a fair
    type's claim, waiting on the type's lock, keeps the rows the other claimed from being dead to
    all, so their index entries are walked again: 1.06-1.09x the server's instructions a job
    (1.15x in an earlier run). That pays where one loop leaves the server idle for a round trip
    per claim (a database far from its worker: +19-42% jobs/s at 5 ms); next to the database
    the jobs/s did not stand out of the noise. docs/BENCHMARKS.md, "Issue 23: the claim loops
    (stop 34)", has the figures. ``claim_loops`` records the most loops each type's drains ran;
    an explicit ``claimers`` (1, 2, ...) is used as given.
    """

    def __init__(
        self,
        registry: Handlers,
        backend: Backend,
        *,
        concurrency: int = 16,
        batch_size: int | None = None,
        prefetch: int | None = None,
        worker_id: str | None = None,
        observer: Observer | None = None,
        claimers: int | None = None,
        step_types: Collection[str] = (),
    ) -> None:
        if claimers is not None and claimers < 1:
            raise ValueError("claimers must be at least 1")
        self.registry = registry
        self.claimers = claimers  # None: one loop, two when the database's round trip is long
        self.round_trip: float | None = None  # seconds: the last drain's (claimers=None), see _round_trip
        self.claim_loops: dict[str, int] = {}  # job type: the most claim loops one of its drains ran
        self.backend = backend
        self.concurrency = concurrency
        self.window = ClaimWindow(concurrency, batch_size=batch_size, prefetch=prefetch)
        self.step_types = frozenset(step_types)  # [user_api] types: their progress names the running step
        self.worker_id = worker_id or f"{socket.gethostname()}:{uuid.uuid4().hex[:8]}"
        self._free = concurrency
        self._reserved = 0  # window room promised to claims in flight
        self._threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="jobkit-job")
        self._running: set[Running] = set()  # claimed and not yet settled (identity-hashed)
        self._live: list[DrainState] = []
        self._changed = asyncio.Event()
        self._stopping = False
        self.released = 0  # jobs handed back (shutdown)
        self.abandoned: list[Running] = []  # still running in a thread after the shutdown's grace
        self.observer: Observer = observer or Quiet()
        self._recorder = Recorder(backend, self._settled, self.observer)
        #: an observer other than Quiet itself (a subclass may watch) is told of each handler's run;
        #: the run is timed only when it is, or when the window adapts to handler times
        self._watched = type(self.observer) is not Quiet
        self._timed = self.window.learns or self._watched
        shortest = min((h.timeout.total_seconds() for h in registry), default=60.0)
        self._tending = Tending(self._running, backend, tick=min(0.5, max(0.02, shortest / 10)))

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def tending(self) -> TaskState:
        """The tending loop's state (supervised: see supervise.py)."""
        return self._tending.status

    @property
    def draining(self) -> int:
        """Drains running now."""
        return len(self._live)

    @property
    def unfinished(self) -> int:
        """Jobs claimed and not yet settled (waiting, running or being recorded)."""
        return len(self._running)

    @property
    def held(self) -> int:
        """Jobs claimed and not yet settled, plus claims in flight."""
        return len(self._running) + self._reserved

    async def drain(
        self, job_type: str, *, max_jobs: int | None = None, budget: timedelta = timedelta(seconds=25),
        linger: float = 0.0, poked: asyncio.Event | None = None,
    ) -> DrainSummary:
        """Claim and run ``job_type`` jobs until none is due, ``max_jobs`` or the budget. With
        ``linger``, an empty queue is re-checked for that many seconds (sooner when ``poked``
        is set) before the drain ends."""
        self._tending.ensure_started()
        handler = self.registry.get(job_type) or self._builtin(job_type)
        d = DrainState(DrainSummary(job_type), handler)
        self._live.append(d)
        deadline = asyncio.get_running_loop().time() + budget.total_seconds()
        try:
            limit = max_jobs if max_jobs is not None else 2**31
            try:
                ends = [await self._claim_loop(d, deadline, limit, linger, poked)]
                for extra in d.claim_loops:  # started by full claims (_more_claimers), even meanwhile
                    ends.append(await extra)
            finally:
                for extra in d.claim_loops:  # this drain was cancelled: so are its other claim loops
                    extra.cancel()
            d.summary.ended = next((e for e in ends if e != "empty"), "empty")
            self.claim_loops[job_type] = max(self.claim_loops.get(job_type, 1), len(ends))
            await self._settle(d)
        finally:
            self._live.remove(d)
        return d.summary

    async def _claim_loop(self, d: DrainState, deadline: float, limit: int, linger: float,
                          poked: asyncio.Event | None) -> str:
        """Claim until a reason to stop; returns it (DrainSummary.ended)."""
        loop = asyncio.get_running_loop()
        outage = Outage()
        idle_since: float | None = None
        pause = LINGER_FIRST
        while True:
            if self._stopping:
                return "stopping"
            if d.summary.claimed >= limit:
                return "max_jobs"
            if loop.time() >= deadline:
                return "budget"
            if d.summary.claimed + d.claiming >= limit:  # another claimer's claim covers the rest
                await self._wait_change()
                continue
            settles = d.settles  # a job settling while the claim is in flight may free a key's room
            try:
                jobs, traced = await self._claim(d, limit - d.summary.claimed - d.claiming)
                if not jobs and await self._wait_for_tokens(d, deadline):
                    continue
            except ConnectionFailed as exc:
                if not await outage.wait(exc, deadline):
                    return "unreachable"
                continue
            outage.over()
            if not jobs and self._stopping:
                return "stopping"
            if jobs:
                self._take(d, jobs, traced)
                if len(jobs) >= self.window.batch:  # a full claim: more jobs are due
                    await self._more_claimers(d, deadline, limit, linger, poked)
                idle_since, pause = None, LINGER_FIRST
                continue
            if await self._held_back(d, settles):
                self._spawn(d)  # a queued job whose runner slot was freed meanwhile starts now
                if d.busy and d.settles == settles:  # no await since this check: no lost wake-up
                    await self._wait_change()  # a job of this drain settles: its key has room again
                continue
            now = loop.time()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since + pause > linger or now + pause >= deadline:
                return "empty"
            await _pause(poked, pause)
            pause = min(pause * 2, LINGER_MAX)

    async def _more_claimers(self, d: DrainState, deadline: float, limit: int, linger: float,
                             poked: asyncio.Event | None) -> None:
        """A claim came back full, so more jobs are due: start another claim loop for this drain
        (up to ``claimers``, or what the round trip asks for). A trickle of jobs keeps one loop and
        one claim per wake-up."""
        if len(d.claim_loops) + 1 < await self._loops_wanted(d) and not self._stopping:
            d.claim_loops.append(asyncio.ensure_future(self._claim_loop(d, deadline, limit, linger, poked)))

    async def _loops_wanted(self, d: DrainState) -> int:
        """``claimers`` when given; else 2 when the drain's round trip is at least
        ROUND_TRIP_SHARE of its last (full) claim's time, else 1."""
        if self.claimers is not None:
            return self.claimers
        if d.claim_loops:  # the second loop is running: nothing to decide
            return 2
        if d.round_trip is None:  # once a drain, at its first full claim
            d.round_trip = self.round_trip = await self._round_trip()
        return 2 if d.round_trip >= ROUND_TRIP_SHARE * d.claim_seconds else 1

    async def _round_trip(self) -> float:
        """The network's round trip: the fastest of PINGS pings sent now (0.0: the database is
        unreachable). Not their median: at a drain's first full claim the pool is still opening
        connections and the runners keep this event loop busy; a ping that waited on either is
        slower than the network, measured: 1.6 and 4.8 ms against 0.4 ms, next to the database."""
        took = []
        for _ in range(PINGS):
            started = time.perf_counter()
            try:
                await self.backend.ping()
            except ConnectionFailed:
                return 0.0
            took.append(time.perf_counter() - started)
        return min(took)

    async def _claim(self, d: DrainState, remaining: int) -> tuple[list[Claimed], tracing.ClaimTrace | None]:
        """The claimed jobs, and the claim's trace (None when tracing is off)."""
        want = await self._reserve(d, remaining)
        if want == 0:  # stopping
            return [], None
        handler = d.handler
        started = time.perf_counter()
        traced = tracing.claim_started(d.summary.type, self.worker_id)
        try:
            jobs = await self.backend.claim(
                d.summary.type, want, self.worker_id, d.lease,
                handler.rate_limit if handler else None, handler.max_attempts if handler else None)
            d.claim_seconds = time.perf_counter() - started
            self.observer.claimed(d.summary.type, len(jobs), d.claim_seconds)
            if traced is not None:
                traced.claimed(jobs)
            return jobs, traced
        except Exception as exc:
            if traced is not None:
                traced.failed(exc)
            raise
        finally:
            self._reserved -= want
            d.claiming -= want
            self._changed.set()

    async def _reserve(self, d: DrainState, remaining: int) -> int:
        """Wait until at least half the claim window is free (or nothing of this drain is left),
        then reserve the room this claim may fill (0: the Drainer is stopping)."""
        while True:
            if self._stopping:
                return 0
            limit = self.window.limit
            room = limit - self.held
            if room >= max(1, limit // 2) or (room > 0 and not d.queue and not d.runners):
                want = min(room, self.window.batch, remaining)
                self._reserved += want
                d.claiming += want
                return want
            self._spawn(d)
            await self._wait_change()

    def _take(self, d: DrainState, jobs: list[Claimed], traced: tracing.ClaimTrace | None = None) -> None:
        d.summary.claimed += len(jobs)
        now = asyncio.get_running_loop().time()
        lease = d.lease
        if traced is None:
            taken = [Running(job, d, lease, now) for job in jobs]
        else:
            taken = [Running(job, d, lease, now, trace=traced.job(job)) for job in jobs]
        self._running.update(taken)
        d.queue.extend(taken)
        self._spawn(d)

    async def _settle(self, d: DrainState) -> None:
        """Wait until every job this drain claimed ran (or was released) and its record returned."""
        while d.runners or d.unsettled or (d.queue and not self._stopping):
            self._spawn(d)
            await self._wait_change()
        if d.queue:  # claimed while shutting down: hand them straight back
            leftovers, d.queue = list(d.queue), deque()
            await self._release(leftovers)

    def _builtin(self, job_type: str) -> Handler | None:
        """`jobkit doctor --ping` enqueues jobkit.ping: every worker answers it."""
        if job_type != "jobkit.ping":
            return None
        worker_id = self.worker_id

        async def pong(_payload: Any, _ctx: Any) -> dict[str, str]:
            return {"pong": worker_id}

        return Handler("jobkit.ping", pong, True, timedelta(seconds=10), timedelta(seconds=40))

    async def shutdown(self, grace: timedelta = timedelta(seconds=30)) -> int:
        """Stop claiming and release the jobs that have not started; give the running ones
        ``grace`` to finish; then cancel the async handlers still running and release their jobs
        once their runners have ended. Returns how many jobs this call released.

        A job is released only when its handler can no longer be running. A sync handler's thread
        cannot be stopped, so a job whose thread still runs after the grace is not released here
        (another worker could start it while the thread goes on): it is kept in ``abandoned``,
        for the caller to release just before the process exits (``release_abandoned``, as
        `jobkit worker serve` does) or to leave to its lease (``abandon``)."""
        self._stopping = True
        self._changed.set()
        waiting = [r for d in self._live for r in d.queue]
        for d in self._live:
            d.queue.clear()
        released = await self._release(waiting)
        runners = [t for d in self._live for t in d.runners]
        running = sum(r.state is Phase.RUNNING for r in self._running)
        if waiting or running:
            log.info("shutdown: stopped claiming; %d job(s) that had not started released; %d running "
                     "job(s) get up to %gs to finish", released, running, grace.total_seconds())
        if runners:
            await asyncio.wait(runners, timeout=grace.total_seconds())
        released += await self._stop_async_handlers()
        await self._await_finished_threads()
        self.abandoned = [r for r in self._running if r.state is Phase.RUNNING]
        if self.abandoned:
            log.warning("shutdown: %d job(s) still running after the %gs grace (sync handlers: a thread "
                        "cannot be stopped); not released while their handlers may still run",
                        len(self.abandoned), grace.total_seconds())
        await self._wait_settled(10.0)
        self._tending.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)
        return released

    async def _stop_async_handlers(self) -> int:
        """After the grace: cancel the runners of the async handlers still running, give them
        CANCEL_WAIT to end, and release the jobs of those that did."""
        late = [r for r in self._running
                if r.state is Phase.RUNNING and r.thread is None and r.task is not None and not r.task.done()]
        for r in late:
            if r.task is not None:
                r.interrupt = stronger(r.interrupt, Interrupt.SHUTDOWN)
                r.task.cancel()
        tasks = {r.task for r in late if r.task is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT)
        ended = [r for r in self._running if r.state is Phase.RUNNING and r.thread is None
                 and (r.task is None or r.task.done())]
        return await self._release(ended)

    async def _await_finished_threads(self) -> None:
        """A sync handler whose thread has just finished: let its runner hand the outcome over
        (it is recorded, not released)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CANCEL_WAIT
        while loop.time() < deadline and any(
                r.state is Phase.RUNNING and r.thread is not None and r.thread.done() for r in self._running):
            await asyncio.sleep(0.005)

    async def release_abandoned(self) -> int:
        """The process is about to exit, so the sync handlers still running cannot go on: release
        their jobs. Call it last, right before the process exits. Returns how many."""
        return await self._release([r for r in self.abandoned if r.state is Phase.RUNNING])

    def abandon(self) -> None:
        """Leave the jobs still running to their leases: their threads go on, their outcomes are
        not recorded (the sweep retries them once their leases expire)."""
        for r in self.abandoned:
            if r.state is Phase.RUNNING and r.task is not None:
                r.state, r.interrupt = Phase.ABANDONED, stronger(r.interrupt, Interrupt.SHUTDOWN)
                r.task.cancel()
            self._running.discard(r)
        self.abandoned = []
        self._changed.set()

    async def _release(self, jobs: list[Running]) -> int:
        """Hand ``jobs`` back (pending, attempt not consumed), each counted in its drain's summary."""
        if not jobs:
            return 0
        try:
            ids = await self.backend.release([(r.job.id, r.job.attempts) for r in jobs])
        except JobkitError as exc:  # their leases expire and the sweep retries them
            log.warning("shutdown: could not release %d job(s): %s", len(jobs), exc.message)
            ids = set()
        for r in jobs:
            if r.job.id in ids:
                r.drain.summary.count(Outcome.RELEASED)
            r.state = Phase.RELEASED
            self._running.discard(r)
        self.released += len(ids)
        self._changed.set()
        return len(ids)

    async def _wait_settled(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                while any(d.unsettled for d in self._live):
                    await self._wait_change()
        except TimeoutError:
            log.warning("shutdown: some outcomes were still being recorded after %.0fs", timeout)

    async def _wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    def _spawn(self, d: DrainState) -> None:
        """Start runners for queued jobs while slots are free (never more runners than jobs). A
        runner that found the queue empty has finished, but stays in ``d.runners`` until its
        done-callback runs: it is not counted, or a job queued in between would wait for no one."""
        while (d.queue and self._free > 0 and not self._stopping
               and (len(d.runners) < len(d.queue) or sum(not t.done() for t in d.runners) < len(d.queue))):
            self._free -= 1
            task = asyncio.create_task(self._runner(d))
            d.runners.add(task)
            task.add_done_callback(functools.partial(self._runner_done, d))

    def _runner_done(self, d: DrainState, task: asyncio.Task[None]) -> None:
        d.runners.discard(task)
        self._free += 1
        self._changed.set()
        if not task.cancelled() and task.exception() is not None:  # a bug in jobkit, not a handler's
            log.error("a job runner failed", exc_info=task.exception())

    async def _held_back(self, d: DrainState, settles: int) -> bool:
        """Nothing claimed while this drain holds jobs (queued, running, or ran with the outcome
        not yet committed) or had some settle during the claim, yet jobs are due: a fair type's
        limits (max_running_per_key, max_running) hold them back until outcomes are recorded."""
        if self._stopping or not (d.busy or d.settles != settles):
            return False
        try:
            return await self.backend.due_count(d.summary.type) > 0
        except ConnectionFailed:
            return False

    async def _wait_for_tokens(self, d: DrainState, deadline: float) -> bool:
        """Nothing claimed: if a rate limit held jobs back, wait for its next token (within budget)."""
        handler = d.handler
        if handler is None or handler.rate_limit is None or self._stopping:
            return False
        if await self.backend.due_count(d.summary.type) == 0:
            return False
        wait = max(await self.backend.token_wait(handler.rate_limit), 0.005)
        if asyncio.get_running_loop().time() + wait >= deadline:
            return False
        await asyncio.sleep(wait)
        return True

    async def _runner(self, d: DrainState) -> None:
        me = asyncio.current_task()
        loop = asyncio.get_running_loop()
        handler = d.handler
        timeout = handler.timeout.total_seconds() if handler else 0.0
        timed = self._timed  # the window adapts or metrics are kept: the handler's time is wanted
        observe, watched = self.window.observe, self._watched
        clock = _clock(loop)
        while d.queue and not self._stopping:
            running = d.queue.popleft()
            if running.interrupt is not None and running.interrupt is Interrupt.CANCELLED:  # while it waited
                self._dropped(running)
                continue
            started = clock()
            running.task, running.deadline, running.state = me, started + timeout, RUNNING
            ended: Ended | None = None  # None: jobkit cancelled this runner (running.interrupt says why)
            try:
                if running.trace is None:  # no span, no context manager
                    ended = await self._execute(running, handler, loop)
                else:
                    with tracing.running(running.trace):
                        ended = await self._execute(running, handler, loop)
            except asyncio.CancelledError:
                if settle(None, running.interrupt, timeout) is Outcome.RELEASED:  # the worker stops
                    if running.trace is not None:  # an abandoned job is left to its lease
                        running.trace.settled(Outcome.UNRECORDED if running.state is Phase.ABANDONED
                                              else Outcome.RELEASED)
                    raise  # its job is released now that its handler has ended
            except BaseException as exc:  # noqa: BLE001 - a bug of jobkit's: the job still reaches a state
                log.exception("running job %s failed inside jobkit", running.job.id)
                ended = Raised(exc)
            if timed:  # inline, as the rest of this loop: a call less per job
                seconds = clock() - started
                observe(seconds)
                if watched:
                    self.observer.ran(running.job.type, seconds)
            if ended is not None:  # its handler has ended: no cycle (context -> job -> context) for the gc
                running.ctx = None
            if running.interrupt is None and type(ended) is Returned:  # the usual case: a result to store
                self._recorder.complete(running, ended.result)
                continue
            await self._ended_otherwise(running, ended, me, timeout)

    async def _ended_otherwise(self, running: Running, ended: Ended | None, me: asyncio.Task[Any] | None,
                               timeout: float) -> None:
        """Hand on an attempt that raised, or that jobkit interrupted (cancelled, timed out)."""
        while running.interrupt is not None and me is not None and me.cancelling():
            me.uncancel()  # jobkit's cancellations, landed or swallowed by the handler (tending.py)
        verdict = settle(ended, running.interrupt, timeout)
        if isinstance(verdict, Outcome):  # cancelled: cancel_job recorded it; a late result is dropped
            self._dropped(running)
            return
        paused = isinstance(verdict, Raised) and (verdict.snooze is not None or verdict.wait is not None)
        if running.trace is not None and isinstance(verdict, Raised) and not paused:
            running.trace.ran(verdict.error)
        # a snooze or a wait: its last report now (completions and failures: with their batch)
        if paused and running.reported is not None and running.reported.pending:
            await self._tending.write_progress([running], asyncio.get_running_loop().time())
        self._recorder.record(running, verdict)

    async def _execute(self, running: Running, handler: Handler | None,
                       loop: asyncio.AbstractEventLoop) -> Ended:
        """The handler's result as JSON text, or the exception that ended the attempt (``loop``:
        the running one, which the runner already holds)."""
        job = running.job
        if handler is None:
            registered = ", ".join(self.registry.types) or "none"
            return Raised(LookupError(
                f"no handler for job type {job.type!r} on worker {self.worker_id} (registered: {registered})"
            ))
        ctx = JobContext(job, backend=self.backend, loop=loop, lease=running.lease, deadline=running.deadline,
                         holder=running, shows_steps=job.type in self.step_types)
        running.ctx = ctx
        try:
            payload = handler.parse(job.payload) if handler.payload_model is not None else job.payload
            if not handler.is_async:
                return await self._in_thread(running, handler, payload, ctx)
            result = await handler.func(payload, ctx)
            return RETURNED_NONE if result is None else Returned(encode_result(result))
        except asyncio.CancelledError as exc:
            if _cancelling():
                raise  # jobkit cancelled it: a timeout or a shutdown (see _runner)
            return Raised(exc)  # the handler's own CancelledError ends only its attempt
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt, ... end only this attempt
            return Raised(exc)

    def _in_thread(self, running: Running, handler: Handler, payload: Any,
                   ctx: JobContext) -> asyncio.Future[Ended]:
        """A sync handler's call in the thread pool; a traced job's thread gets a copy of the
        context, so that the handler sees its span (executor threads get none by themselves).
        Its concurrent future stays on the job (``thread``): unlike the asyncio future, it is done
        only when the thread has finished, even after a cancellation."""
        if running.trace is None:
            future = self._threads.submit(_call, handler.func, payload, ctx)
        else:
            future = self._threads.submit(_call_in, contextvars.copy_context(), handler.func, payload, ctx)
        running.thread = future  # done only once the thread has finished (shutdown asks)
        return asyncio.wrap_future(future)

    def _settled(self, jobs: list[Running]) -> None:
        """``jobs`` left the window (recorded or dropped; their drains counted them): one wake-up."""
        self._running.difference_update(jobs)
        self._changed.set()

    def _dropped(self, running: Running) -> None:
        """A job cancelled while this worker held it: counted, never recorded (cancel_job did)."""
        if running.trace is not None:
            running.trace.settled(Outcome.CANCELLED)
        running.drain.summary.count(Outcome.CANCELLED)
        running.state = Phase.CANCELLED
        running.drain.settles += 1
        self._settled([running])


class Outage:
    """Waiting out an unreachable database: 0.1 s doubling to 2 s between tries, logged once."""

    def __init__(self) -> None:
        self.delay = 0.0

    async def wait(self, exc: ConnectionFailed, deadline: float) -> bool:
        """Sleep before the next try; False when that would pass ``deadline``."""
        if self.delay == 0.0:
            log.warning("database unreachable, retrying: %s", exc.message)
        self.delay = min(max(self.delay * 2, 0.1), 2.0)
        if asyncio.get_running_loop().time() + self.delay >= deadline:
            return False
        await asyncio.sleep(self.delay)
        return True

    def over(self) -> None:
        if self.delay:
            log.info("database reachable again")
            self.delay = 0.0


def _call(func: Any, payload: Any, ctx: JobContext) -> Ended:
    """A sync handler's call in its thread (its result encoded there too), every exception
    returned rather than raised: a GeneratorExit carried by the future would be thrown into the
    runner coroutine, and Python's await closes the inner coroutines on GeneratorExit instead of
    letting them catch it."""
    try:
        result = func(payload, ctx)
        return RETURNED_NONE if result is None else Returned(encode_result(result))
    except BaseException as exc:  # noqa: BLE001 - handed back to _execute, which records it
        return Raised(exc)


def _call_in(context: contextvars.Context, func: Any, payload: Any, ctx: JobContext) -> Ended:
    return context.run(_call, func, payload, ctx)


def _clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``, or the ``time.monotonic`` it returns when it is asyncio's own (a Python
    frame less, twice per job); another loop (uvloop, a test's) keeps its own clock."""
    return time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _pause(poked: asyncio.Event | None, seconds: float) -> None:
    """Wait ``seconds``, or less when ``poked`` is set meanwhile (a wake-up arrived)."""
    if poked is None:
        await asyncio.sleep(seconds)
        return
    try:
        async with asyncio.timeout(seconds):
            await poked.wait()
    except TimeoutError:
        pass
    poked.clear()
