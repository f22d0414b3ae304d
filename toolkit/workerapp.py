"""Putting a worker together: load the user's Registry, pick a backend, serve HTTP or listen."""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from .backends import Backend
from .backends.postgres import PostgresBackend
from .config import Settings
from .drain import Drainer
from .endpoint import WorkerEndpoint
from .exceptions import ConfigError
from .handlers import Registry
from .target import resolve_url

log = logging.getLogger("jobkit.worker")


@dataclass(frozen=True)
class WorkerOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    concurrency: int = 16
    batch_size: int = 50
    prefetch: int = 1
    mode: str = "background"
    grace: timedelta = timedelta(seconds=30)
    prepare: bool = True
    token: str | None = None  # default: the database's worker_token secret


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


def postgres_backend(settings: Settings, options: WorkerOptions) -> PostgresBackend:
    return PostgresBackend(resolve_url(settings), settings.schema,
                           max_size=min(max(options.concurrency // 2, 4), 20), prepare=options.prepare)


def serve(registry: Registry, backend: Backend, options: WorkerOptions) -> None:
    """Serve the endpoint with uvicorn until SIGTERM/SIGINT (then drain gracefully)."""
    import uvicorn

    endpoint = WorkerEndpoint(registry, backend, token=options.token, concurrency=options.concurrency,
                              batch_size=options.batch_size, prefetch=options.prefetch,
                              mode=options.mode, grace=options.grace)
    config = uvicorn.Config(endpoint.app, host=options.host, port=options.port, lifespan="on",
                            log_level="info", timeout_graceful_shutdown=int(options.grace.total_seconds()))
    uvicorn.Server(config).run()


def listen(registry: Registry, backend: PostgresBackend, settings: Settings, options: WorkerOptions) -> None:
    """LISTEN for wake-ups (the NOTIFY transport) until SIGTERM/SIGINT."""
    from .listen import Listener

    async def main() -> None:
        await backend.open()
        drainer = Drainer(registry, backend, concurrency=options.concurrency,
                          batch_size=options.batch_size, prefetch=options.prefetch)
        listener = Listener(drainer, backend, f"{settings.schema}_wake")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.create_task(listener.run())
        log.info("listening on %s_wake for %s", settings.schema, ", ".join(registry.types))
        await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        released = await drainer.shutdown(options.grace)
        await listener.wait_idle(5)
        task.cancel()
        log.info("worker stopped; %d claimed job(s) released", released)
        await backend.close()

    asyncio.run(main())
