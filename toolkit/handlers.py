"""Programming model: a Registry of handlers (the exceptions a handler raises to steer retries live
in retries.py and are re-exported here; the registered Handler, in worker/handler.py).

    jobs = jobkit.Registry()

    @jobs.handler("send_email", max_attempts=5, timeout=30, rate_limit="mailgun")
    async def send_email(payload, ctx):
        ...
        return {"message_id": ...}

A handler is a sync or async function ``(payload, ctx) -> result``; the result must be
JSON-serializable. With ``payload=Model`` (a pydantic model class), the payload is validated and the
handler receives the model instance; a payload that does not validate fails the job permanently
with the validation error (it is never retried). Any exception retries with backoff;
``Retry(after=...)`` chooses the delay, ``RateLimited(retry_after=...)`` snoozes without consuming an
attempt, ``Permanent`` fails for good.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from .config import LEASE_HINT, MIN_LEASE, Backoff
from .exceptions import ConfigError
from .retries import Permanent, RateLimited, Retry, Seconds, to_delta
from .testing import run_inline
from .worker.handler import Handler, HandlerFunc

__all__ = ["Handler", "HandlerFunc", "MAX_DURATION", "Permanent", "RateLimited", "Registry", "Retry",
           "Seconds"]
MAX_DURATION = timedelta(days=7)


class Registry:
    """Job types and the functions that run them."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(
        self, job_type: str, *, timeout: Seconds = 60, lease: Seconds | None = None,
        max_attempts: int | None = None, backoff: Backoff | None = None, rate_limit: str | None = None,
        payload: Any = None,
    ) -> Callable[[HandlerFunc], HandlerFunc]:
        """Register the decorated function for ``job_type``. ``lease`` defaults to the timeout plus
        30 s; long jobs heartbeat automatically, so the lease may be shorter than the timeout (but
        not shorter than 5 s). ``max_attempts`` applies to jobs enqueued without their own.
        ``payload``: a pydantic model class; the handler then receives the validated instance."""
        if payload is not None and not callable(getattr(payload, "model_validate", None)):
            raise ConfigError(f"handler {job_type}: payload= must be a pydantic model class, got {payload!r}",
                              hint="pip install pydantic and pass a BaseModel subclass")

        def register(func: HandlerFunc) -> HandlerFunc:
            if job_type in self._handlers:
                raise ConfigError(f"job type {job_type!r} already has a handler")
            limit = _bounded(to_delta(timeout), f"handler {job_type}: timeout", timedelta(0))
            held = _bounded(to_delta(lease) if lease is not None else limit + timedelta(seconds=30),
                            f"handler {job_type}: lease", MIN_LEASE)
            if max_attempts is not None and not 1 <= max_attempts <= 1000:
                raise ConfigError(
                    f"handler {job_type}: max_attempts must be from 1 to 1000, got {max_attempts}")
            self._handlers[job_type] = Handler(
                type=job_type, func=func, is_async=inspect.iscoroutinefunction(func), timeout=limit,
                lease=held, max_attempts=max_attempts, backoff=backoff, rate_limit=rate_limit,
                payload_model=payload,
            )
            return func

        return register

    def get(self, job_type: str) -> Handler | None:
        return self._handlers.get(job_type)

    def run_inline(self, job_type: str, payload: Any, **options: Any) -> Any:
        """For tests: run one job through its handler in this process, with the worker's real retry
        and backoff logic over an in-memory queue (time jumps over the backoff). Returns its final
        JobResult (``.status``, ``.result``, ``.error``, ``.attempts``); see jobkit.testing."""
        return run_inline(self, job_type, payload, **options)

    def __contains__(self, job_type: object) -> bool:
        return job_type in self._handlers

    def __iter__(self) -> Iterator[Handler]:
        return iter(self._handlers.values())

    @property
    def types(self) -> list[str]:
        return sorted(self._handlers)


def _bounded(value: timedelta, what: str, low: timedelta) -> timedelta:
    if value < low or value > MAX_DURATION:
        floor = f"at least {low.total_seconds():g}s and " if low else ""
        raise ConfigError(f"{what} must be {floor}at most 7 days, got {value.total_seconds():g}s",
                          hint=LEASE_HINT if low else "split longer work into several jobs")
    return value

