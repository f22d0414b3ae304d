"""An in-process worker for `jobkit dev`: woken the way this database wakes workers.

NOTIFY transport: the endpoint's LISTEN connection on jobkit's channel. pg_net transport: the HTTP
endpoint on a free local port, registered with `jobkit secrets set` so that pg_net calls it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any

from ..config import Settings
from ..connector import Database
from ..handlers import Registry
from ..names import wake_channel
from ..schema.sync import resolve_transport
from .backends.postgres import PostgresBackend
from .endpoint import EndpointOptions, WorkerEndpoint
from .secrets import set_secrets
from .serve import user_step_types


class LocalWorker:
    """``async with LocalWorker(db, settings, registry):`` runs a worker until the block ends."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        registry: Registry,
        *,
        echo: Callable[[str], None] = print,
        concurrency: int = 8,
    ) -> None:
        self.db = db
        self.settings = settings
        self.registry = registry
        self.echo = echo
        self.concurrency = concurrency
        self.transport = "notify"
        self.endpoint: WorkerEndpoint | None = None
        self._server: Any = None
        self._serving: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> LocalWorker:
        with self.db.session() as session:
            self.transport = resolve_transport(session, self.settings)
        listen = None if self.transport == "pg_net" else wake_channel(self.settings.schema)
        options = EndpointOptions(concurrency=self.concurrency, grace=timedelta(seconds=5), listen=listen,
                                  linger=2.0 if listen is None else 0.0, budget=timedelta(seconds=30),
                                  step_types=user_step_types(self.settings))
        self.endpoint = WorkerEndpoint(self.registry, PostgresBackend(self.db.url, self.settings.schema),
                                       options)
        await self.endpoint.start()
        if listen is None:
            await self._serve_http()
        else:
            assert self.endpoint.listener is not None
            async with asyncio.timeout(10):  # LISTEN is in place before the first enqueue
                await self.endpoint.listener.listening.wait()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._serving is not None:
            await asyncio.gather(self._serving, return_exceptions=True)
        if self.endpoint is not None:
            await self.endpoint.stop()

    async def _serve_http(self) -> None:
        import uvicorn

        assert self.endpoint is not None
        port = _free_port()
        set_secrets(self.db, self.settings, url=f"http://127.0.0.1:{port}/run")
        config = uvicorn.Config(
            self.endpoint.app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._serving = asyncio.create_task(self._server.serve())
        while not self._server.started and not self._serving.done():
            await asyncio.wait([self._serving], timeout=0.02)
        self.echo(f"worker endpoint on http://127.0.0.1:{port}/run (its secret is in the database)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
