"""Several OS processes draining one queue: each child sets up its worker, waits at a barrier, then
drains; the time runs from the first handler call in any child to the last child's end."""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing as mp
from collections.abc import Awaitable, Callable
from typing import Any

from .verify import Tally

#: A child: ``async def child(url, *args, ready=callable) -> Tally.export(end)``; it awaits
#: ``ready()`` once set up, just before draining; ``end`` is time.monotonic() at its drain's end.
Child = Callable[..., Awaitable[dict[str, Any]]]


def run(child: str, url: str, args: tuple[Any, ...], procs: int) -> tuple[float, Tally, list[int]]:
    """Run ``child`` ("module:function") in ``procs`` processes; (seconds, merged tally, calls each)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    results = ctx.Queue()
    workers = [ctx.Process(target=_main, args=(child, url, args, barrier, results), daemon=True)
               for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        barrier.wait(timeout=120)
        outcomes = [results.get(timeout=3600) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.terminate()
    errors = [o["error"] for o in outcomes if "error" in o]
    if errors:
        raise RuntimeError(f"a drain process failed: {errors[0]}")
    tally = Tally()
    for o in outcomes:
        tally.merge(o["calls"], o["ids"], o["first"])
    return tally.since_first(max(o["end"] for o in outcomes)), tally, [o["calls"] for o in outcomes]


def _main(child: str, url: str, args: tuple[Any, ...], barrier: Any, results: Any) -> None:
    module, name = child.split(":")
    fn: Child = getattr(importlib.import_module(module), name)

    async def ready() -> None:
        await asyncio.to_thread(barrier.wait, 120)

    try:
        results.put(asyncio.run(fn(url, *args, ready=ready)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        barrier.abort()
        results.put({"error": f"{type(exc).__name__}: {exc}"})
