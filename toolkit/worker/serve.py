"""Putting a worker together: load the user's Registry, pick a backend, serve it with uvicorn.

Both transports run the same app: POST /run for pg_net wake-ups, GET /healthz, and with
``listen`` a LISTEN connection for NOTIFY wake-ups as well. A worker that gives up (the database or
LISTEN unreachable for too long) raises WorkerGaveUp once uvicorn has stopped, so the process exits
non-zero with a one-line reason and a supervisor restarts it.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from ..app import resolve_url
from ..config import Settings, supabase_api_from_env
from ..connector import Database
from ..exceptions import ConfigError, JobkitError, WorkerGaveUp
from ..handlers import Registry
from ..queries import queries
from ..serving import bind
from ..serving import server as http_server
from ..serving import url as served_at
from .backends import Backend
from .backends.postgres import PostgresBackend
from .backends.supabase import SupabaseBackend
from .endpoint import EndpointOptions, WorkerEndpoint

if TYPE_CHECKING:
    import uvicorn


@dataclass(frozen=True)
class WorkerOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    prepare: bool = True
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)


def load_registry(spec: str) -> Registry:
    """``"package.module:jobs"`` -> the Registry object it names."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{spec!r} is not MODULE:ATTRIBUTE", hint="e.g. jobkit worker serve app.jobs:jobs")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name}: {exc}",
                          hint="run from your project's folder, or fix PYTHONPATH") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
        raise ConfigError(f"importing {module_name} failed: {type(exc).__name__}: {exc}",
                          hint="run `python -c 'import " + module_name + "'` to see the traceback") from exc
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise ConfigError(f"{spec} is not a jobkit.Registry (got {type(registry).__name__})",
                          hint="create it with `jobs = jobkit.Registry()`")
    return registry


def choose_backend(settings: Settings, options: WorkerOptions, *, data_api: bool = False) -> Backend:
    """The database directly (the default), or with ``data_api`` Supabase's Data API, which needs
    $SUPABASE_URL, $SUPABASE_SERVICE_ROLE_KEY and the [api] schema, and cannot LISTEN."""
    if not data_api:
        return postgres_backend(settings, options)
    api = supabase_api_from_env()
    if api is None or settings.api_schema is None or options.endpoint.listen:
        raise ConfigError("--data-api needs $SUPABASE_URL, $SUPABASE_SERVICE_ROLE_KEY and [api] schema "
                          "(and no --listen)", hint="set them, then run `jobkit deploy`")
    return SupabaseBackend(*api, settings.api_schema)


def transport_warning(settings: Settings, options: WorkerOptions) -> str | None:
    """A warning when no wake-up would reach this worker: the database wakes over NOTIFY but the
    worker only serves HTTP, or over pg_net while the worker only LISTENs. None when they match
    (or when the database cannot tell: the worker reports that itself)."""
    try:
        with Database(resolve_url(settings)).session(connect_timeout=5) as session:
            rows = session.all(queries(settings.schema)["settings_all"])
    except JobkitError:
        return None
    transport = {r["key"]: r["value"] for r in rows}.get("transport")
    if transport == "notify" and not options.endpoint.listen:
        return ("the database wakes workers with NOTIFY (it has no pg_net), and this worker only serves "
                "HTTP: nothing will wake it. Run it with --listen, or install pg_net and run `jobkit deploy`")
    if transport == "pg_net" and options.endpoint.listen:
        return (f"the database wakes workers over HTTP (pg_net) at the URL `jobkit secrets set` stored; "
                f"this worker also LISTENs on {options.endpoint.listen}, which nothing notifies. "
                "Make sure that URL reaches this worker")
    return None


def user_step_types(settings: Settings) -> frozenset[str]:
    """The job types open to end users ([user_api] types): a durable job of one of them names the
    step it runs in its progress, which its owner's row shows. None without [user_api]."""
    return frozenset(settings.user_api.types) if settings.user_api is not None else frozenset()


def postgres_backend(settings: Settings, options: WorkerOptions) -> PostgresBackend:
    return PostgresBackend(resolve_url(settings), settings.schema,
                           max_size=min(max(options.endpoint.concurrency // 2, 4), 20),
                           prepare=options.prepare)


def check_database(settings: Settings) -> None:
    """Connect once before serving: a bad URL or an unreachable database is one line and exit 1,
    not a pool's retries and a traceback."""
    with Database(resolve_url(settings)).session(connect_timeout=5) as session:
        session.scalar("select 1")


def check_port(host: str, port: int) -> None:
    """Bind the address once before anything else: a busy port is one line and exit 1, not
    uvicorn's banner, its error and exit 3 (serve() binds again and keeps the socket)."""
    bind(host, port).close()


def serve(registry: Registry, backend: Backend, options: WorkerOptions) -> None:
    """Take the port, then serve the endpoint until SIGTERM/SIGINT (then drain gracefully; a second
    signal exits at once); raise WorkerGaveUp when the worker gave up. A busy port is one
    ConfigError before anything starts."""
    import asyncio

    import uvicorn

    holder: list[uvicorn.Server] = []

    def stop(_reason: str) -> None:
        if holder:
            holder[0].should_exit = True

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit:  # a second SIGINT/SIGTERM (uvicorn would only stop waiting for requests)
                exit_at_once(endpoint, sig)
            super().handle_exit(sig, frame)

    with bind(options.host, options.port) as sock:
        endpoint = WorkerEndpoint(registry, backend, options.endpoint, on_fatal=stop, exits_process=True)
        server = http_server(endpoint.app, server_class=Server, lifespan="on", log_level="info",
                             timeout_graceful_shutdown=int(options.endpoint.grace.total_seconds()))
        holder.append(server)

        async def run() -> None:
            await endpoint.start()  # a failure here is one line (uvicorn's lifespan would print a traceback)
            logging.getLogger("jobkit.worker").info("worker on %s", served_at(options.host, sock))
            await server.serve(sockets=[sock])

        try:
            asyncio.run(run())
        except SystemExit:  # uvicorn's own: it logged why
            if server.started:
                raise
    if endpoint.failure is not None:
        raise WorkerGaveUp(endpoint.failure)
    if not server.started:
        raise ConfigError(f"the worker could not serve on {options.host}:{options.port}",
                          hint="see the log above")


def exit_at_once(endpoint: WorkerEndpoint, sig: int) -> NoReturn:
    """A second signal: end the process now (it runs in the signal handler: no logging locks)."""
    drainer = endpoint.drainer
    held = drainer.unfinished if drainer is not None else 0
    os.write(2, (f"error: a second {signal.Signals(sig).name}: exiting at once; {held} unfinished "
                 f"job(s) are left to their leases\n").encode())
    os._exit(1)
