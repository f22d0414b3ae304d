"""The rate limit on log lines anyone can cause (refused requests): a burst per message template per
interval, then one count of what was dropped."""

from __future__ import annotations

import logging

import pytest
from jobkit.logthrottle import Throttle, install, throttled


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logger(caplog: pytest.LogCaptureFixture) -> logging.Logger:
    caplog.set_level(logging.INFO)
    found = logging.getLogger("jobkit.test.throttled")
    found.filters.clear()
    return found


def test_a_burst_per_interval_then_a_count_of_what_was_dropped(
        logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger.addFilter(Throttle(burst=3, interval=60.0, clock=clock))
    for i in range(1000):
        logger.warning("refused /run: %s", f"reason {i}")
    assert [r.getMessage() for r in caplog.records] == [f"refused /run: reason {i}" for i in range(3)]
    clock.now += 61
    logger.warning("refused /run: %s", "later")
    assert caplog.records[-1].getMessage() == \
        "refused /run: later (suppressed 997 similar line(s) in the last 61s)"
    logger.warning("refused /run: %s", "again")
    assert caplog.records[-1].getMessage() == "refused /run: again"  # nothing dropped since


def test_each_template_and_level_has_its_own_budget(logger: logging.Logger,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    logger.addFilter(Throttle(burst=2, interval=60.0, clock=Clock()))
    for _ in range(10):
        logger.warning("refused /run: %s", "x")
        logger.warning("closed a connection: %s", "y")
        logger.info("refused /run: %s", "x")
    assert len(caplog.records) == 6


def test_a_percent_in_the_count_note_cannot_break_formatting(
        logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger.addFilter(Throttle(burst=1, interval=1.0, clock=clock))
    logger.warning("100%% of %s", "them")
    logger.warning("100%% of %s", "them")
    clock.now += 2
    logger.warning("100%% of %s", "them")
    assert caplog.records[-1].getMessage().startswith("100% of them (suppressed 1 similar")


def test_install_is_idempotent() -> None:
    logger = throttled("jobkit.test.once")
    first = install(logger)
    assert install(logger) is first and sum(isinstance(f, Throttle) for f in logger.filters) == 1


def test_records_at_the_ceiling_and_up_are_never_held_back(
        logger: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    logger.addFilter(Throttle(burst=1, interval=60.0, clock=Clock(), below=logging.ERROR))
    for _ in range(5):
        logger.warning("Invalid HTTP request received.")
        logger.error("Exception in ASGI application")
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 5
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == 1
