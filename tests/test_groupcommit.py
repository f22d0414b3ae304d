"""GroupCommit: what arrives while a statement is in flight goes out together in the next one."""

from __future__ import annotations

import asyncio

from jobkit.worker.groupcommit import GroupCommit


def test_items_arriving_during_a_flush_share_the_next_call() -> None:
    calls: list[list[int]] = []
    settled: list[tuple[list[int], object, object]] = []

    async def send(batch: list[int]) -> int:
        calls.append(list(batch))
        await asyncio.sleep(0.01)
        return sum(batch)

    async def main() -> None:
        group: GroupCommit[int, int] = GroupCommit(send, lambda b, r, e: settled.append((b, r, e)))
        group.submit(1)
        await asyncio.sleep(0)  # the first flush is now in flight
        for n in (2, 3, 4):
            group.submit(n)
        while not group.idle:
            await asyncio.sleep(0.005)

    asyncio.run(main())
    assert calls == [[1], [2, 3, 4]]
    assert settled == [([1], 1, None), ([2, 3, 4], 9, None)]


def test_a_failed_call_is_settled_with_its_error_and_the_next_one_still_runs() -> None:
    settled: list[tuple[list[str], object, object]] = []

    async def send(batch: list[str]) -> str:
        await asyncio.sleep(0)
        if "bad" in batch:
            raise RuntimeError("refused")
        return "ok"

    async def main() -> None:
        group: GroupCommit[str, str] = GroupCommit(send, lambda b, r, e: settled.append((b, r, e)))
        group.submit("bad")
        await asyncio.sleep(0)
        group.submit("good")
        while not group.idle:
            await asyncio.sleep(0.001)

    asyncio.run(main())
    (first, result, error), second = settled
    assert first == ["bad"] and result is None and isinstance(error, RuntimeError)
    assert second == (["good"], "ok", None)
