"""Fixtures of the integration tests that start real worker processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from workers import Worker


@pytest.fixture
def workers(db_url: str) -> Iterator[Callable[..., Worker]]:
    """Start `jobkit worker serve` processes on the test database; each killed at the end."""
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        started.append(Worker(db_url, *args))
        return started[-1]

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.communicate(timeout=10)
