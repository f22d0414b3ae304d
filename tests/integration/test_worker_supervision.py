"""A worker never runs half-dead: a long-lived task that dies is restarted, and /healthz answers
503 while it is down. The LISTEN task is made to die for real: its connection is terminated by the
server while its backend refuses to open a new LISTEN session (an injected bug)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
from jobkit.connector import Session
from jobkit.handlers import Registry
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.endpoint import EndpointOptions, WorkerEndpoint
from poll import wait_for_async


class Breakable(PostgresBackend):
    """The real backend, whose LISTEN sessions fail with a bug while ``broken``."""

    broken = False

    def listen(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        if self.broken:
            raise RuntimeError("injected: no LISTEN session")
        return super().listen(channel)


def test_a_dead_listener_is_restarted_and_healthz_is_503_meanwhile(db_url: str, session: Session) -> None:
    jobs = Registry()

    @jobs.handler("sup.ok")
    async def ok(payload: Any, ctx: Any) -> str:
        return "ok"

    manager = Lifecycle(session, "jobkit")
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        backend = Breakable(db_url)
        endpoint = WorkerEndpoint(jobs, backend, EndpointOptions(listen="jobkit_wake", linger=0.0))
        await endpoint.start()
        assert endpoint.listener is not None
        async with asyncio.timeout(10):
            await endpoint.listener.listening.wait()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=endpoint.app), base_url="http://w")

        async def status(code: int) -> bool:
            response = await client.get("/healthz")
            seen.append(response.json())
            return response.status_code == code

        try:
            assert await status(200), seen[-1]
            backend.broken = True
            await asyncio.to_thread(session.execute, "select pg_terminate_backend(pid) from pg_stat_activity "
                                    "where application_name = 'jobkit worker (listen)'")

            async def restarting() -> bool:  # LISTEN lost (503 already), then the task died
                return await status(503) and seen[-1]["tasks"]["listener"] != "running"

            await wait_for_async(restarting, 20, "healthz said 503 for the dead task")
            assert seen[-1]["tasks"]["listener"] == "restarting: RuntimeError: injected: no LISTEN session"
            assert not seen[-1]["ok"]
            backend.broken = False
            await wait_for_async(lambda: status(200), 20, "the listener was restarted")
            assert seen[-1]["tasks"]["listener"] == "running" and seen[-1]["listener"] == "listening"
            job = await asyncio.to_thread(manager.enqueue, NewJob("sup.ok", {}))  # woken over NOTIFY

            async def done() -> bool:
                found = await asyncio.to_thread(manager.get, job)
                return found is not None and found.status == "completed"

            await wait_for_async(done, 20, "a job ran after the restart")
        finally:
            await client.aclose()
            await endpoint.stop()

    asyncio.run(main())
