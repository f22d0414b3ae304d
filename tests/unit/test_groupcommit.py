"""GroupCommit: what arrives while a statement is in flight goes out together in the next one."""

from __future__ import annotations

import asyncio
from typing import Any

from jobkit.worker.groupcommit import GroupCommit


class Settled:
    """The settle callback's records, and an event once ``expected`` calls have settled."""

    def __init__(self, expected: int) -> None:
        self.records: list[tuple[list[Any], object, object]] = []
        self.expected = expected
        self.done = asyncio.Event()

    def __call__(self, batch: list[Any], result: object, error: object) -> None:
        self.records.append((batch, result, error))
        if len(self.records) == self.expected:
            self.done.set()


def test_items_arriving_during_a_flush_share_the_next_call() -> None:
    calls: list[list[int]] = []

    async def main() -> list[tuple[list[Any], object, object]]:
        in_flight, release = asyncio.Event(), asyncio.Event()

        async def send(batch: list[int]) -> int:
            calls.append(list(batch))
            in_flight.set()
            await release.wait()
            return sum(batch)

        settled = Settled(2)
        group: GroupCommit[int, int] = GroupCommit(send, settled)
        group.submit(1)
        await in_flight.wait()  # the first flush is in flight
        for n in (2, 3, 4):
            group.submit(n)
        release.set()
        await asyncio.wait_for(settled.done.wait(), 5)
        assert group.idle
        return settled.records

    records = asyncio.run(main())
    assert calls == [[1], [2, 3, 4]]
    assert records == [([1], 1, None), ([2, 3, 4], 9, None)]


def test_a_failed_call_is_settled_with_its_error_and_the_next_one_still_runs() -> None:
    async def main() -> list[tuple[list[Any], object, object]]:
        in_flight, release = asyncio.Event(), asyncio.Event()

        async def send(batch: list[str]) -> str:
            in_flight.set()
            await release.wait()
            if "bad" in batch:
                raise RuntimeError("refused")
            return "ok"

        settled = Settled(2)
        group: GroupCommit[str, str] = GroupCommit(send, settled)
        group.submit("bad")
        await in_flight.wait()
        group.submit("good")
        release.set()
        await asyncio.wait_for(settled.done.wait(), 5)
        return settled.records

    (first, result, error), second = asyncio.run(main())
    assert first == ["bad"] and result is None and isinstance(error, RuntimeError)
    assert second == (["good"], "ok", None)
