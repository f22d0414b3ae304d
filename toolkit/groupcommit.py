"""Group commit: many tasks hand in items; one statement carries everything that arrived while the
previous one was in flight (River's BatchCompleter, graphile-worker's batched completions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Collect items from many tasks; send everything pending in one call while none is in flight."""

    def __init__(self, send: Callable[[Sequence[T]], Awaitable[R]]) -> None:
        self._send = send
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._busy = False
        self._task: asyncio.Task[None] | None = None  # the flush in progress (kept referenced)

    async def add(self, item: T) -> R:
        return await self.submit(item)

    def submit(self, item: T) -> asyncio.Future[R]:
        """Queue ``item`` without waiting; the future resolves when its statement returns."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if not self._busy:
            self._busy = True
            self._task = asyncio.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    result = await self._send([item for item, _ in batch])
                except Exception as exc:  # noqa: BLE001 - handed to every waiter
                    for _, fut in batch:
                        fut.set_exception(exc)
                else:
                    for _, fut in batch:
                        fut.set_result(result)
        finally:
            self._busy = False
