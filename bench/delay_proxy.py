"""A TCP proxy that holds every chunk ``rtt / 2`` seconds in each direction: a database that far away
(a worker on another host, region or provider than its PostgreSQL), on one machine. It runs in its
own process (so its forwarding does not share the measured interpreter's GIL); bytes keep their
order; only the time they arrive changes. Used by bench.claim_loops ``--rtt``."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from typing import Any


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pump() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.create_task(pump())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((loop.time() + delay, b""))
    await task


async def _serve(port: int, target: int, delay: float, ready: Any) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(_pipe(reader, up_writer, delay), _pipe(up_reader, writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    ready.put(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


def _main(target: int, delay: float, ready: Any) -> None:
    asyncio.run(_serve(0, target, delay, ready))


class DelayProxy:
    """``with DelayProxy(port, rtt) as p``: p.port forwards to 127.0.0.1:port, ``rtt`` s a round trip."""

    def __init__(self, target: int, rtt: float) -> None:
        self.target, self.rtt = target, rtt
        self.port = 0
        self._proc: Any = None

    def __enter__(self) -> DelayProxy:
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        self._proc = ctx.Process(target=_main, args=(self.target, self.rtt / 2, ready), daemon=True)
        self._proc.start()
        self.port = int(ready.get(timeout=30))
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.join(5)
