"""What a handler raises to steer its attempt: ``Retry(after=...)`` chooses the delay before the
next attempt, ``RateLimited(retry_after=...)`` snoozes the job without consuming an attempt,
``Permanent`` fails it for good. Any other exception retries with backoff.

A base module: it imports nothing of the worker, so handlers, the JobContext and the worker's
recording can all import it (``jobkit.Retry`` and ``jobkit.handlers.Retry`` are these).
"""

from __future__ import annotations

from datetime import timedelta

from .exceptions import ConfigError

Seconds = float | int | timedelta


class Retry(Exception):
    """Fail this attempt and retry after ``after`` (seconds or a timedelta)."""

    def __init__(self, message: str = "retry requested", *, after: Seconds) -> None:
        super().__init__(message)
        self.after = to_delta(after)


class RateLimited(Exception):
    """The API said 429: run this job again after ``retry_after`` without consuming an attempt."""

    def __init__(self, message: str = "rate limited", *, retry_after: Seconds = 1) -> None:
        super().__init__(message)
        self.retry_after = to_delta(retry_after)


class Permanent(Exception):
    """Fail this job now, without retrying (bad input, a 4xx that will never succeed)."""


def to_delta(value: Seconds) -> timedelta:
    """``value`` (seconds or a timedelta) as a positive timedelta; ConfigError otherwise."""
    result = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if result <= timedelta(0):
        raise ConfigError(f"durations must be positive, got {value!r}")
    return result
