"""Run an async body against a backend opened for it (and closed after), from sync test code."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Opens(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...


B = TypeVar("B", bound=Opens)


def with_backend(backend: B, body: Callable[[B], Awaitable[T]]) -> T:
    async def main() -> T:
        await backend.open()
        try:
            return await body(backend)
        finally:
            await backend.close()

    return asyncio.run(main())
