"""The one poll helper of the test suites: wait until a condition on real state holds, bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_for(check: Callable[[], object], timeout: float, what: str, every: float = 0.05) -> float:
    """Call ``check`` every ``every`` seconds until it returns something true; the seconds it took.
    Fails (AssertionError naming ``what``) once ``timeout`` seconds have passed without it."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:g}s: {what}")
        time.sleep(every)
    return time.monotonic() - start


async def wait_for_async(check: Callable[[], Awaitable[object]], timeout: float, what: str,
                         every: float = 0.02) -> float:
    """``wait_for`` for a coroutine check, sleeping with asyncio (the event loop goes on); a check
    that hangs is cancelled at the timeout too."""
    start = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:g}s: {what}") from None
    return time.monotonic() - start
