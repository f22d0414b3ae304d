"""The worker endpoint pg_net calls: an ASGI app (starlette), served by uvicorn or mounted.

    POST /run   {"type": "send_email", "max_jobs": 100, "budget_ms": 25000}
                Authorization: Bearer <token>   (constant-time compare; 401 otherwise)
    GET  /healthz

By default /run answers 202 at once and drains in the background within the budget: pg_net waits
only up to its timeout. ``mode="sync"`` drains first and answers 200 with a summary, for hosts that
stop work once the response is sent (serverless functions).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .backends import Backend
from .drain import Drainer
from .handlers import Registry

log = logging.getLogger("jobkit.worker")
MAX_BUDGET_MS = 15 * 60 * 1000
TOKEN_REFRESH = 60.0


class WorkerEndpoint:
    """Owns the backend and the Drainer; ``app`` is the ASGI application."""

    def __init__(self, registry: Registry, backend: Backend, *, token: str | None = None,
                 concurrency: int = 16, batch_size: int = 50, prefetch: int = 1,
                 mode: str = "background", grace: timedelta = timedelta(seconds=30),
                 default_budget: timedelta = timedelta(seconds=25)) -> None:
        self.registry = registry
        self.backend = backend
        self.mode = mode
        self.grace = grace
        self.default_budget = default_budget
        self._options = (concurrency, batch_size, prefetch)
        self._fixed_token = token
        self._token: str | None = token
        self._token_at = -TOKEN_REFRESH
        self.drainer: Drainer | None = None
        self._drains: set[asyncio.Task[Any]] = set()
        self._lock = asyncio.Lock()
        self.app = Starlette(routes=[Route("/run", self.run, methods=["POST"]),
                                     Route("/healthz", self.healthz, methods=["GET"])],
                             lifespan=self.lifespan)

    @asynccontextmanager
    async def lifespan(self, _app: Any = None) -> AsyncIterator[None]:
        """Open on startup; on shutdown (SIGTERM under uvicorn) drain gracefully and close."""
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> Drainer:
        async with self._lock:
            if self.drainer is None:
                await self.backend.open()
                concurrency, batch_size, prefetch = self._options
                self.drainer = Drainer(self.registry, self.backend, concurrency=concurrency,
                                       batch_size=batch_size, prefetch=prefetch)
            return self.drainer

    async def stop(self) -> None:
        if self.drainer is None:
            return
        released = await self.drainer.shutdown(self.grace)
        if self._drains:
            await asyncio.wait(self._drains, timeout=5)
        log.info("worker stopped; %d claimed job(s) released", released)
        await self.backend.close()

    async def healthz(self, _request: Request) -> JSONResponse:
        drainer = self.drainer
        return JSONResponse({"ok": drainer is not None and not drainer.stopping,
                             "worker": drainer.worker_id if drainer else None,
                             "types": self.registry.types, "draining": len(self._drains)})

    async def run(self, request: Request) -> JSONResponse:
        drainer = await self.start()
        denied = await self._authenticate(request)
        if denied is not None:
            return denied
        parsed = await _parse_run(request, self.default_budget)
        if isinstance(parsed, JSONResponse):
            return parsed
        job_type, max_jobs, budget = parsed
        if drainer.stopping:
            return JSONResponse({"error": "worker is shutting down"}, status_code=503)
        drain = drainer.drain(job_type, max_jobs=max_jobs, budget=budget)
        if self.mode == "sync" or request.query_params.get("wait") in ("1", "true"):
            summary = await drain
            return JSONResponse(summary.as_dict(), status_code=200)
        task = asyncio.create_task(drain)
        self._drains.add(task)
        task.add_done_callback(self._drain_done)
        return JSONResponse({"accepted": True, "type": job_type, "max_jobs": max_jobs,
                             "budget_ms": int(budget.total_seconds() * 1000),
                             "worker": drainer.worker_id}, status_code=202)

    def _drain_done(self, task: asyncio.Task[Any]) -> None:
        self._drains.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("drain failed", exc_info=task.exception())

    async def _authenticate(self, request: Request) -> JSONResponse | None:
        expected = await self._expected_token()
        if expected is None:
            return JSONResponse({"error": "no worker token configured",
                                 "hint": "run `jobkit secrets set` or set JOBKIT_WORKER_TOKEN"},
                                status_code=503)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
            return JSONResponse({"error": "missing or invalid bearer token"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return None

    async def _expected_token(self) -> str | None:
        """A fixed token, or the database's, re-read every minute so a rotation takes effect."""
        if self._fixed_token is not None:
            return self._fixed_token
        now = asyncio.get_running_loop().time()
        if now - self._token_at >= TOKEN_REFRESH or self._token is None:
            self._token = await self.backend.worker_token()
            self._token_at = now
        return self._token


async def _parse_run(request: Request, default_budget: timedelta
                     ) -> tuple[str, int | None, timedelta] | JSONResponse:
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError as exc:
        return JSONResponse({"error": f"the body must be JSON: {exc}"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
    unknown = sorted(set(body) - {"type", "max_jobs", "budget_ms"})
    job_type, max_jobs, budget_ms = body.get("type"), body.get("max_jobs"), body.get("budget_ms")
    problem = _problem(unknown, job_type, max_jobs, budget_ms)
    if problem:
        return JSONResponse({"error": problem}, status_code=422)
    budget = timedelta(milliseconds=budget_ms) if budget_ms is not None else default_budget
    return str(job_type), max_jobs, budget


def _problem(unknown: list[str], job_type: Any, max_jobs: Any, budget_ms: Any) -> str | None:
    checks: list[tuple[bool, str]] = [
        (bool(unknown),
         f"unknown field {unknown[0] if unknown else ''!r}; allowed: type, max_jobs, budget_ms"),
        (not isinstance(job_type, str) or not job_type, "type must be a non-empty string"),
        (max_jobs is not None and (not _is_int(max_jobs) or not 1 <= max_jobs <= 1_000_000),
         "max_jobs must be an integer from 1 to 1000000"),
        (budget_ms is not None and (not _is_int(budget_ms) or not 1 <= budget_ms <= MAX_BUDGET_MS),
         f"budget_ms must be an integer from 1 to {MAX_BUDGET_MS}"),
    ]
    return next((message for failed, message in checks if failed), None)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def create_app(registry: Registry, backend: Backend, **options: Any) -> Starlette:
    """The ASGI app; mount it in your Starlette/FastAPI app or serve it with uvicorn."""
    return WorkerEndpoint(registry, backend, **options).app


