"""An in-process worker for `jobkit dev`: woken the way this database wakes workers.

NOTIFY transport: a Listener on jobkit's channel. pg_net transport: the HTTP endpoint on a free
local port, registered with `jobkit secrets set` so that pg_net calls it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any

from .backends.postgres import PostgresBackend
from .config import Settings
from .connector import Database
from .drain import Drainer
from .handlers import Registry
from .listen import Listener
from .secrets import set_secrets
from .sync import resolve_transport


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
        self.backend = PostgresBackend(db.url, settings.schema)
        self.drainer = Drainer(registry, self.backend, concurrency=concurrency, batch_size=20)
        self.transport = "notify"
        self._tasks: list[asyncio.Task[Any]] = []
        self._server: Any = None

    async def __aenter__(self) -> LocalWorker:
        with self.db.session() as session:
            self.transport = resolve_transport(session, self.settings)
        await self.backend.open()
        if self.transport == "pg_net":
            await self._serve_http()
        else:
            listener = Listener(
                self.drainer, self.backend, f"{self.settings.schema}_wake", budget=timedelta(seconds=30)
            )
            self._tasks.append(asyncio.create_task(listener.run()))
            await asyncio.sleep(0.3)  # LISTEN is in place before the first enqueue
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        released = await self.drainer.shutdown(timedelta(seconds=5))
        if released:
            self.echo(f"released {released} claimed job(s) back to pending")
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.should_exit = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.backend.close()

    async def _serve_http(self) -> None:
        import uvicorn

        from .endpoint import WorkerEndpoint

        port = _free_port()
        set_secrets(self.db, self.settings, url=f"http://127.0.0.1:{port}/run", token=None)
        endpoint = WorkerEndpoint(self.registry, self.backend)
        endpoint.drainer = self.drainer
        config = uvicorn.Config(
            endpoint.app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._tasks.append(asyncio.create_task(self._server.serve()))
        while not self._server.started:
            await asyncio.sleep(0.05)
        self.echo(f"worker endpoint on http://127.0.0.1:{port}/run (its token is in the database)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
