"""Rate-limited logging for lines an outsider can cause (refused requests, malformed HTTP).

Anyone who can reach the worker or the dashboard can make it refuse a request, and every refusal
used to write a WARNING: about 1,000 log lines a second from one unauthenticated caller. A
:class:`Throttle` lets through at most ``burst`` records per ``interval`` for each message template
(so one noisy kind of refusal does not hide another), and the first record let through after some
were dropped says how many: ``(suppressed 1234 similar line(s) in the last 60s)``.

    log = throttled("jobkit.worker.refused")   # a logger with the filter installed once
    log.warning("refused /run: %s", reason)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

BURST = 10  # records let through per template per interval
INTERVAL = 60.0  # seconds


@dataclass
class _Window:
    started: float
    passed: int = 0
    suppressed: int = 0


class Throttle(logging.Filter):
    """A logging filter: per (level, message template), ``burst`` records per ``interval``, then
    a count of what was dropped on the next record let through."""

    def __init__(self, burst: int = BURST, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic, below: int = logging.CRITICAL + 1) -> None:
        super().__init__()
        self.burst, self.interval, self.clock, self.below = burst, interval, clock, below
        self._windows: dict[tuple[int, str], _Window] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.below:  # e.g. uvicorn's errors: never held back
            return True
        key = (record.levelno, str(record.msg))
        now = self.clock()
        with self._lock:
            window = self._windows.get(key)
            if window is None or now - window.started >= self.interval:
                dropped = window.suppressed if window else 0
                since = now - window.started if window else 0.0
                window = self._windows[key] = _Window(now)
            else:
                dropped, since = 0, 0.0
            if window.passed >= self.burst:
                window.suppressed += 1
                return False
            window.passed += 1
        if dropped:
            note = f" (suppressed {dropped} similar line(s) in the last {since:.0f}s)"
            record.msg = str(record.msg) + note.replace("%", "%%")
        return True


def install(logger: logging.Logger, burst: int = BURST, interval: float = INTERVAL,
            below: int = logging.CRITICAL + 1) -> Throttle:
    """The logger's Throttle (records at level ``below`` and up pass), added once (a second call
    returns the first)."""
    for found in logger.filters:
        if isinstance(found, Throttle):
            return found
    throttle = Throttle(burst, interval, below=below)
    logger.addFilter(throttle)
    return throttle


def throttled(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with a :class:`Throttle` installed."""
    logger = logging.getLogger(name)
    install(logger)
    return logger
