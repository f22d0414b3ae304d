"""The claim window: how many jobs a worker holds (claimed and unfinished) and claims at once.

A worker that holds too few jobs idles while its next claim is in flight; one that holds too many
keeps long jobs from other workers. By default the window adapts to how long handlers run: it
holds the running jobs plus about HORIZON seconds of further work, so very short jobs get four
claims of MAX_BATCH in flight (the benchmark's tuned settings) and long jobs get one spare job per
worker at most. ``prefetch`` (window = concurrency x prefetch) and ``batch_size`` fix either value.
"""

from __future__ import annotations

import math

HORIZON = 0.25  # seconds of work a worker holds beyond what it is running
MAX_BATCH = 100  # jobs per claim statement
MAX_EXTRA = 4 * MAX_BATCH  # most jobs held beyond the running ones
_ALPHA = 0.05  # weight of one job in the running average of handler time


class ClaimWindow:
    """The window's size and the claim size, fixed or adapting to observed handler times."""

    def __init__(self, concurrency: int, *, batch_size: int | None = None,
                 prefetch: int | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self._fixed_batch = batch_size
        self._fixed_limit = concurrency * prefetch if prefetch else None
        self.job_seconds: float | None = None  # running average of handler time

    @property
    def adaptive(self) -> bool:
        return self._fixed_limit is None or self._fixed_batch is None

    @property
    def learns(self) -> bool:
        """Whether handler times change the window (``observe`` matters): not when it is fixed."""
        return self._fixed_limit is None

    @property
    def limit(self) -> int:
        """Most jobs claimed and not yet finished."""
        if self._fixed_limit is not None:
            return self._fixed_limit
        if self.job_seconds is None:  # nothing measured yet: one spare job per slot
            return 2 * self.concurrency
        per_second = self.concurrency / max(self.job_seconds, 1e-6)
        return self.concurrency + min(MAX_EXTRA, math.ceil(per_second * HORIZON))

    @property
    def batch(self) -> int:
        """Most jobs one claim asks for."""
        if self._fixed_batch is not None:
            return self._fixed_batch
        if self._fixed_limit is not None:  # a fixed window: fill it
            return min(MAX_BATCH, self._fixed_limit)
        return min(MAX_BATCH, max(self.concurrency, math.ceil(self.limit / 4)))  # ~4 claims in flight

    def observe(self, seconds: float) -> None:
        """One handler ran for ``seconds``."""
        if self.job_seconds is None:
            self.job_seconds = seconds
        else:
            self.job_seconds += _ALPHA * (seconds - self.job_seconds)

    def describe(self) -> str:
        mode = "adaptive" if self.adaptive else "fixed"
        return f"{mode}: window {self.limit}, claims of {self.batch}"
