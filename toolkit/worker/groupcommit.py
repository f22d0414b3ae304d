"""Group commit: many runners hand in items; one statement carries everything that arrived while
the previous one was in flight (River's BatchCompleter, graphile-worker's batched completions).

No future per item: ``settle`` receives each batch with its result (or the exception that failed
it), which keeps the per-job cost of recording an outcome to a list append."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("jobkit.worker")


class GroupCommit(Generic[T, R]):
    """Collect items; send everything pending in one call while none is in flight."""

    def __init__(self, send: Callable[[list[T]], Awaitable[R]],
                 settle: Callable[[list[T], R | None, BaseException | None], None]) -> None:
        self._send = send
        self._settle = settle
        self._pending: list[T] = []
        self._task: asyncio.Task[None] | None = None  # the flush in progress (kept referenced)

    def submit(self, item: T) -> None:
        """Queue ``item``; it goes out with the next statement."""
        self._pending.append(item)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush())

    @property
    def idle(self) -> bool:
        return self._task is None

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    result = await self._send(batch)
                except Exception as exc:  # noqa: BLE001 - handed to settle with the batch
                    self._settled(batch, None, exc)
                else:
                    self._settled(batch, result, None)
        finally:
            self._task = None

    def _settled(self, batch: list[T], result: R | None, error: BaseException | None) -> None:
        """``settle``; a bug in it is logged, and the next batches still go out (the recorder
        never stops silently)."""
        try:
            self._settle(batch, result, error)
        except Exception:  # noqa: BLE001 - logged with its traceback
            log.exception("settling %d recorded item(s) failed", len(batch))
