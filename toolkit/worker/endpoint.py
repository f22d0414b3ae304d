"""The worker endpoint the database wakes: an ASGI app (starlette), served by uvicorn or mounted.

    POST /run   {"type": "send_email", "budget_ms": 25000, "nonce": "...", "at": 1767225600.5}
                X-Jobkit-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>   (signing.py; 401 otherwise)
    GET  /healthz   200 when the database (and, with --listen, the LISTEN connection) is up and every
                    long-lived task runs, else 503

A signed request is accepted once per fleet: the database consumes its signature (consume_wake),
and a repeat, in this process or any other, is answered 200 ``{"duplicate": true}`` with nothing
done. By default /run answers 202 at once and the Dispatcher drains the type in the background until it
is empty (``at`` in the future sets a timer instead). ``mode="sync"`` (or ``POST /run?wait=1``)
drains first, within ``budget_ms``, and answers 200 with a summary, for hosts that stop work once
the response is sent (serverless functions). With ``listen`` the worker also LISTENs for NOTIFY
wake-ups. The long-lived tasks (the database watch, the listener, the tending loop) are supervised
(supervise.py): one that ends unexpectedly is restarted with backoff, and /healthz answers 503
meanwhile. A database (or LISTEN) that stays unreachable for ``give_up``, or a task that keeps
failing that long, makes the worker give up: ``failure`` says why and ``on_fatal`` is called (the
CLI then exits non-zero).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..durations import format_duration
from ..exceptions import ConnectionFailed, JobkitError, WorkerGaveUp
from ..handlers import Registry
from ..logthrottle import throttled
from ..serving import read_body
from .backends import Backend
from .dispatch import Dispatcher
from .drain import Drainer
from .listen import Listener, Notifications
from .metrics import CONTENT_TYPE, WorkerMetrics, allowed
from .presence import HEARTBEAT, Presence, describe
from .signing import HEADER, WINDOW, Verdict, Verifier
from .supervise import TaskState, supervise

log = logging.getLogger("jobkit.worker")
refused = throttled("jobkit.worker.refused")  # anyone can cause these: rate-limited
MAX_BUDGET_MS = 15 * 60 * 1000
MAX_BODY = 64 * 1024  # bytes; a wake-up body is about 150
MAX_SIGNATURE = 256  # characters of the signature header; a real one is about 80
KEYS_REFRESH = 60.0  # seconds between re-reads of the signing keys
KEYS_MIN_AGE = 0.1  # a signature no key matches re-reads them, at most this often
HEALTH_EVERY = 5.0  # seconds between database checks


@dataclass(frozen=True)
class EndpointOptions:
    """How the endpoint runs; the CLI's `worker serve` options."""

    concurrency: int = 16
    batch_size: int | None = None  # None: adaptive (window.py)
    prefetch: int | None = None  # None: adaptive
    mode: str = "background"
    grace: timedelta = timedelta(seconds=30)
    budget: timedelta = timedelta(seconds=25)  # of a drain when the wake-up names none
    linger: float = 2.0  # seconds an emptied drain re-checks for jobs arriving right after
    listen: str | None = None  # the NOTIFY channel to LISTEN on, if any
    give_up: timedelta = timedelta(minutes=5)
    secret: str | None = None  # fixed signing secret; default: the database's (rotations followed)
    signature_window: float = WINDOW  # seconds a wake-up's signature stays valid
    metrics_token: str | None = None  # GET /metrics needs it as a bearer token; None: loopback only
    metrics_ttl: float = 15.0  # seconds the backlog figures of /metrics are cached
    heartbeat: timedelta | None = HEARTBEAT  # how often the worker writes its row (presence.py); None: off
    step_types: frozenset[str] = frozenset()  # [user_api] types: the owner's row shows the running step


class WorkerEndpoint:
    """Owns the backend, the Drainer and the Dispatcher; ``app`` is the ASGI application."""

    def __init__(self, registry: Registry, backend: Backend, options: EndpointOptions = EndpointOptions(),
                 *, on_fatal: Callable[[str], None] | None = None, exits_process: bool = False) -> None:
        self.registry = registry
        self.exits_process = exits_process  # the process ends with stop() (`jobkit worker serve`)
        self.backend = backend
        self.options = options
        self.on_fatal = on_fatal
        self.failure: str | None = None
        self.drainer: Drainer | None = None
        self.dispatcher: Dispatcher | None = None
        self.listener: Listener | None = None
        self.presence: Presence | None = None
        self._beating: asyncio.Task[None] | None = None
        self._verifier = Verifier(window=options.signature_window)
        self._keys: list[str] = [options.secret] if options.secret else []
        self._keys_at = -KEYS_REFRESH
        self._rereading: asyncio.Future[list[str]] | None = None
        self._db = _Health()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.tasks: dict[str, TaskState] = {}  # the supervised ones, by name
        self._lock = asyncio.Lock()
        self.caught_up = asyncio.Event()  # the start-up catch-up has woken what was due (HTTP mode)
        self.metrics = WorkerMetrics(getattr(backend, "backlog", None), ttl=options.metrics_ttl,
                                     workers=getattr(backend, "worker_counts", None),
                                     drains=lambda: self.drainer.draining if self.drainer else 0,
                                     tasks_down=lambda: sum(t.down for t in self.task_states.values()))
        self.app = Starlette(routes=[Route("/run", self.run, methods=["POST"]),
                                     Route("/healthz", self.healthz, methods=["GET"]),
                                     Route("/metrics", self.metrics_page, methods=["GET"])],
                             lifespan=self.lifespan)

    @asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        """Open on startup; on shutdown (SIGTERM under uvicorn) drain gracefully and close."""
        try:
            await self.start()
        except JobkitError as exc:
            self.failure = exc.message
            raise
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> Drainer:
        async with self._lock:
            if self.drainer is None:
                await self.backend.open()
                await self._record_types()
                o = self.options
                self.drainer = Drainer(self.registry, self.backend, concurrency=o.concurrency,
                                       batch_size=o.batch_size, prefetch=o.prefetch, observer=self.metrics,
                                       step_types=o.step_types)
                self.dispatcher = Dispatcher(self.drainer, budget=o.budget, linger=o.linger)
                self._db.up()
                self._supervised("database", self._watch_database)
                self._present(self.drainer)
                if o.listen:
                    self.listener = Listener(self.dispatcher, _notifications(self.backend), o.listen,
                                             give_up=o.give_up, on_invalid=self.metrics.invalid_notification)
                    self._supervised("listener", self.listener.run)
                else:
                    self._spawn(self._catch_up(self.dispatcher))
            return self.drainer

    def _present(self, drainer: Drainer) -> None:
        """Register this worker and keep its row fresh (presence.py), unless the heartbeat is off."""
        if self.options.heartbeat is None:
            return
        info = describe(drainer.worker_id, transport="notify" if self.options.listen else "pg_net",
                        concurrency=self.options.concurrency, types=self.registry.types,
                        heartbeat=self.options.heartbeat)
        self.presence = Presence(self.backend, info, lambda: drainer.unfinished)
        self._beating = asyncio.create_task(self.presence.run())

    async def _absent(self) -> None:
        """Stop the heartbeat, then mark this worker gone (a clean shutdown)."""
        if self._beating is not None and self.presence is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)
            self._beating = None
            await self.presence.leave()

    async def _record_types(self) -> None:
        """Tell the database which types this worker serves (the CLI then knows them); a failure
        is only logged: the worker runs without it."""
        try:
            await self.backend.record_types(self.registry.types)
        except JobkitError as exc:
            log.warning("could not record the job types this worker serves: %s", exc.message)

    async def _catch_up(self, dispatcher: Dispatcher) -> None:
        """Wake every type with due jobs once at start (nothing waits for cron); ``caught_up`` is
        set when that has been decided."""
        try:
            await dispatcher.catch_up()
        finally:
            self.caught_up.set()

    async def stop(self) -> None:
        """Shut the Drainer down (drain.py's ``shutdown``). Sync handlers still running after the
        grace: with ``exits_process`` their jobs are released and the process exits at once
        (they cannot go on); otherwise they are left to their leases."""
        if self.drainer is None or self.dispatcher is None:
            return
        await self.drainer.shutdown(self.options.grace)
        await self._absent()
        if self.drainer.abandoned and self.exits_process:
            await self._release_and_exit(self.drainer)
        self.drainer.abandon()
        await self.dispatcher.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        log.info("worker stopped; %d claimed job(s) released", self.drainer.released)
        await self.backend.close()

    async def _release_and_exit(self, drainer: Drainer) -> NoReturn:
        """The process exits now, so the handler threads still running cannot go on: release
        their jobs, then end the process without waiting for the threads."""
        late = await drainer.release_abandoned()
        log.warning("worker stopped; %d claimed job(s) released, %d of them as the process exits (their "
                    "sync handlers were still running after the grace)", drainer.released, late)
        for handler in logging.getLogger().handlers:
            handler.flush()
        if self.failure is not None:
            sys.stderr.write(f"error: {self.failure}\nhint: {WorkerGaveUp.default_hint}\n")
        sys.stderr.flush()
        os._exit(1 if self.failure is not None else 0)

    @property
    def task_states(self) -> dict[str, TaskState]:
        """Every supervised task of this worker, by name."""
        tending = {"tending": self.drainer.tending} if self.drainer is not None else {}
        return {**self.tasks, **tending}

    async def healthz(self, _request: Request) -> JSONResponse:
        await self._check_database(max_age=1.0)
        listening = self.listener.state if self.listener else None
        tasks = self.task_states
        ok = (self.drainer is not None and not self.drainer.stopping and self._db.ok
              and (self.listener is None or self.listener.listening.is_set()) and self.failure is None
              and not any(t.down for t in tasks.values()))
        body = {"ok": ok, "database": self._db.state, "listener": listening, "failure": self.failure,
                "tasks": {name: t.state for name, t in tasks.items()},
                "invalid_notifications": self.listener.invalid if self.listener else 0,
                "worker": self.drainer.worker_id if self.drainer else None, "types": self.registry.types,
                "heartbeat": ({"every_s": self.presence.every, "beats": self.presence.beats,
                               "failing": self.presence.missed} if self.presence else None),
                "draining": self.dispatcher.draining if self.dispatcher else [],
                "window": self.drainer.window.describe() if self.drainer else None}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def metrics_page(self, request: Request) -> Response:
        """Prometheus text format; the bearer token (or, without one, loopback clients only)."""
        host = request.client.host if request.client else None
        if not allowed(self.options.metrics_token, request.headers.get("authorization"), host):
            return JSONResponse({"error": "metrics need Authorization: Bearer $JOBKIT_METRICS_TOKEN"},
                                status_code=401)
        try:
            body = await self.metrics.render()
        except JobkitError as exc:
            return JSONResponse({"error": f"the backlog query failed: {exc.message}"}, status_code=503)
        return Response(body, media_type=CONTENT_TYPE)

    async def run(self, request: Request) -> JSONResponse:
        drainer = await self.start()
        body = await read_body(request, MAX_BODY)
        if body is None:
            return JSONResponse({"error": f"the body is larger than {MAX_BODY} bytes"}, status_code=413)
        verdict = _malformed(request) or await self._authenticate(request, body)
        if isinstance(verdict, JSONResponse):
            return verdict
        parsed = _parse_run(body, self.options.budget)
        if isinstance(parsed, JSONResponse):
            return parsed
        if drainer.stopping:
            return JSONResponse({"error": "worker is shutting down"}, status_code=503)
        used = await self._consume(verdict)
        if used is not None:
            return used
        if self.options.mode == "sync" or request.query_params.get("wait") in ("1", "true"):
            return await self._run_now(drainer, parsed)
        if parsed.max_jobs is not None:  # a bounded one-off drain, outside the Dispatcher
            self._spawn(drainer.drain(parsed.type, max_jobs=parsed.max_jobs, budget=parsed.budget))
        else:
            assert self.dispatcher is not None
            self.dispatcher.wake(parsed.type, at=parsed.at)
        return JSONResponse({"accepted": True, "type": parsed.type, "worker": drainer.worker_id,
                             **({"at": parsed.at} if parsed.at is not None else {})}, status_code=202)

    async def _run_now(self, drainer: Drainer, parsed: RunRequest) -> JSONResponse:
        if parsed.at is not None and parsed.at > _now():
            return JSONResponse({"type": parsed.type, "claimed": 0, "ended": "not due yet"})
        summary = await drainer.drain(parsed.type, max_jobs=parsed.max_jobs, budget=parsed.budget)
        return JSONResponse(summary.as_dict(), status_code=200)

    async def _consume(self, verdict: Verdict) -> JSONResponse | None:
        """Accept the signed request once per fleet (the database consumes its signature). A
        repeat is a harmless duplicate: 200, nothing done (pg_net's own delivery of a request that
        someone posted first from its queue must not count as a failed wake-up)."""
        try:
            expires = datetime.fromtimestamp(verdict.expires, UTC)
            fresh = await self.backend.consume_wake(verdict.nonce, expires)
        except JobkitError as exc:
            log.warning("refused /run: cannot record the wake-up as used: %s", exc.message)
            return JSONResponse({"error": "the database is unreachable; the wake-up was not accepted"},
                                status_code=503)
        if fresh:
            return None
        log.debug("duplicate /run: this signed wake-up was accepted before")
        return JSONResponse({"accepted": False, "duplicate": True}, status_code=200)

    async def _authenticate(self, request: Request, body: bytes) -> Verdict | JSONResponse:
        header = request.headers.get(HEADER)
        keys = await self._signing_keys()
        if not keys:
            return JSONResponse({"error": "no worker secret configured",
                                 "hint": "run `jobkit secrets set` or set JOBKIT_WORKER_SECRET"},
                                status_code=503)
        verdict = self._verifier.check(header, body, keys)
        if verdict.stale_keys and self.options.secret is None:  # maybe a rotation: read the keys again
            verdict = self._verifier.check(header, body, await self._reread_keys())
        if verdict.ok:
            return verdict
        refused.warning("refused /run: %s", verdict.reason)
        return JSONResponse({"error": verdict.reason}, status_code=401)

    async def _reread_keys(self) -> list[str]:
        """Read the keys again (one read for concurrent callers, at most one per KEYS_MIN_AGE: a
        request signed after a rotation always meets a read that sees it)."""
        reading = self._rereading
        if reading is None:
            reading = self._rereading = asyncio.ensure_future(self._reread())
        try:
            return await asyncio.shield(reading)
        finally:
            if reading.done() and self._rereading is reading:
                self._rereading = None

    async def _reread(self) -> list[str]:
        wait = self._keys_at + KEYS_MIN_AGE - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        return await self._signing_keys(refresh=True)

    async def _signing_keys(self, refresh: bool = False) -> list[str]:
        """The fixed secret, or the database's keys, re-read every minute (and on a mismatch)."""
        if self.options.secret is not None:
            return self._keys
        now = asyncio.get_running_loop().time()
        if refresh or not self._keys or now - self._keys_at >= KEYS_REFRESH:
            try:
                self._keys = await self.backend.worker_keys()
                self._keys_at = now
            except JobkitError as exc:
                log.warning("cannot read the signing keys: %s", exc.message)
        return self._keys

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker task failed", exc_info=task.exception())

    def _supervised(self, name: str, run: Callable[[], Any]) -> None:
        """Run ``run()`` for as long as the worker lives, restarted whenever it ends (supervise.py)."""
        state = self.tasks[name] = TaskState(name)
        self._spawn(self._guard(state, run))

    async def _guard(self, state: TaskState, run: Callable[[], Any]) -> None:
        try:
            await supervise(state, run, give_up=self.options.give_up.total_seconds())
        except WorkerGaveUp as exc:
            self._fatal(exc.message)

    async def _watch_database(self) -> None:
        """Check the database every few seconds: catch up when it is back, give up after give_up
        (WorkerGaveUp)."""
        while True:
            await asyncio.sleep(HEALTH_EVERY)
            was_ok = self._db.ok
            await self._check_database(max_age=0.0)
            if self._db.ok and not was_ok and self.listener is None and self.dispatcher is not None:
                await self.dispatcher.catch_up()
            down = self._db.down_for()
            if down >= self.options.give_up.total_seconds():
                raise WorkerGaveUp(f"the database was unreachable for "
                                   f"{format_duration(self.options.give_up)}: {self._db.state}")

    async def _check_database(self, max_age: float) -> None:
        if self._db.age() < max_age:
            return
        try:
            async with asyncio.timeout(3.0):
                await self.backend.ping()
        except (ConnectionFailed, TimeoutError) as exc:
            self._db.down(getattr(exc, "message", None) or "no answer within 3s")
        except JobkitError as exc:
            self._db.down(exc.message)
        else:
            self._db.up()

    def _fatal(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            log.error("worker giving up: %s", reason)
            if self.on_fatal is not None:
                self.on_fatal(reason)


class _Health:
    """The database's last known state."""

    def __init__(self) -> None:
        self.ok = True
        self.state = "unknown"
        self._checked = -1e9
        self._down_since: float | None = None

    def up(self) -> None:
        self.ok, self.state, self._down_since = True, "up", None
        self._checked = _loop_time()

    def down(self, why: str) -> None:
        now = _loop_time()
        self.ok, self.state, self._checked = False, f"unreachable: {why}", now
        self._down_since = now if self._down_since is None else self._down_since

    def age(self) -> float:
        return _loop_time() - self._checked

    def down_for(self) -> float:
        return 0.0 if self._down_since is None else _loop_time() - self._down_since


@dataclass(frozen=True)
class RunRequest:
    type: str
    budget: timedelta
    max_jobs: int | None = None
    at: float | None = None


_FIELDS = {"type", "max_jobs", "budget_ms", "nonce", "at"}


def _parse_run(raw: bytes, default_budget: timedelta) -> RunRequest | JSONResponse:
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError) as exc:
        return JSONResponse({"error": f"the body must be JSON: {exc}"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
    problem = _problem(body)
    if problem:
        return JSONResponse({"error": problem}, status_code=422)
    budget_ms = body.get("budget_ms")
    at = body.get("at")
    return RunRequest(str(body["type"]),
                      timedelta(milliseconds=budget_ms) if budget_ms is not None else default_budget,
                      body.get("max_jobs"), float(at) if at is not None else None)


def _problem(body: dict[str, Any]) -> str | None:
    unknown = sorted(set(body) - _FIELDS)
    job_type, max_jobs = body.get("type"), body.get("max_jobs")
    budget_ms, at = body.get("budget_ms"), body.get("at")
    checks: list[tuple[bool, str]] = [
        (bool(unknown),
         f"unknown field {unknown[0] if unknown else ''!r}; allowed: {', '.join(sorted(_FIELDS))}"),
        (not isinstance(job_type, str) or not job_type, "type must be a non-empty string"),
        (isinstance(job_type, str) and not _storable(job_type), "type must be text PostgreSQL can store "
         "(no NUL, valid Unicode)"),
        (max_jobs is not None and (not _is_int(max_jobs) or not 1 <= max_jobs <= 1_000_000),
         "max_jobs must be an integer from 1 to 1000000"),
        (budget_ms is not None and (not _is_int(budget_ms) or not 1 <= budget_ms <= MAX_BUDGET_MS),
         f"budget_ms must be an integer from 1 to {MAX_BUDGET_MS}"),
        (at is not None and (not isinstance(at, int | float) or isinstance(at, bool) or not 0 <= at < 1e11),
         "at must be a Unix time in seconds"),
    ]
    return next((message for failed, message in checks if failed), None)


def _malformed(request: Request) -> JSONResponse | None:
    """A 401 for a signature header that cannot be one (the database sends ``t=<10 digits>,v1=<64
    hex>``): bounded and plain ASCII before anything parses it."""
    header = request.headers.get(HEADER)
    if header is None or (len(header) <= MAX_SIGNATURE and header.isascii() and header.isprintable()):
        return None
    reason = f"malformed {HEADER} header"
    refused.warning("refused /run: %s", reason)
    return JSONResponse({"error": reason}, status_code=401)


def _storable(text: str) -> bool:
    """No job type can hold a NUL or a lone surrogate (PostgreSQL text cannot)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _notifications(backend: Backend) -> Notifications:
    if not hasattr(backend, "listen"):
        raise JobkitError("this backend cannot LISTEN",
                          hint="--listen needs a database URL, not the Data API")
    return backend  # type: ignore[return-value]


def _now() -> float:
    return time.time()


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def create_app(registry: Registry, backend: Backend, **options: Any) -> Starlette:
    """The ASGI app; mount it in your Starlette/FastAPI app or serve it with uvicorn."""
    return WorkerEndpoint(registry, backend, EndpointOptions(**options)).app
