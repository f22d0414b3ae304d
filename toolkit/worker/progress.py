"""Progress a handler reports with ``ctx.progress(...)``, throttled.

A call only keeps the latest value in memory (no I/O, safe from a sync handler's thread): the
worker's tending task writes the reports that changed, all running jobs in one ``set_progress``
statement, at most every FLUSH_EVERY seconds per job, and the runner writes a job's last report
before its outcome. A handler calling it in a tight loop therefore costs at most
1 / FLUSH_EVERY writes a second, plus one at the end.

A job of a type open to end users ([user_api] types) also names the durable step it started last
(``"step": {"name", "started_at"}``), so that its owner's row of the per-user API shows the step
running now: the same throttled write carries it (no statement of its own), and a step shorter than
a flush may go unseen. Other types never carry it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..exceptions import ConfigError

FLUSH_EVERY = 0.25  # seconds between two writes of one job's progress
MAX_MESSAGE = 1000  # characters


@dataclass(slots=True, eq=False)
class Reported:
    """The latest report of one running job, and which version of it the database has."""

    value: dict[str, Any] | None = None
    version: int = 0  # bumped by each report (from any thread)
    written: int = 0  # the version last written
    written_at: float = float("-inf")  # loop time of that write
    step: dict[str, Any] | None = None  # the durable step started last ([user_api] types only)

    def report(self, value: dict[str, Any]) -> None:
        self.value = value if self.step is None else {**value, "step": self.step}
        self.version += 1

    def start_step(self, name: str, started: datetime) -> None:
        """A durable step starts: the next write names it (with the handler's last report)."""
        self.step = {"name": name, "started_at": started.isoformat()}
        self.value = {**(self.value or {}), "step": self.step}
        self.version += 1

    @property
    def pending(self) -> bool:
        return self.version != self.written


def progress_json(amount: Any, message: str | None = None, data: Any = None) -> dict[str, Any]:
    """The stored object: {"fraction", "done", "total", "message", "data"} (absent when not given).
    ``amount`` is a fraction from 0 to 1, a (done, total) pair, or None (a message alone)."""
    value: dict[str, Any] = {}
    if isinstance(amount, tuple | list):
        if len(amount) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in amount) \
                or amount[1] <= 0 or not 0 <= amount[0] <= amount[1]:
            raise ConfigError(f"progress counts must be (done, total) with 0 <= done <= total and total > 0, "
                              f"got {amount!r}", hint="call ctx.progress((3, 10)) or ctx.progress(0.3)")
        value = {"fraction": amount[0] / amount[1], "done": amount[0], "total": amount[1]}
    elif amount is not None:
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount) \
                or not 0 <= amount <= 1:
            raise ConfigError(f"progress must be a fraction from 0 to 1 or (done, total), got {amount!r}",
                              hint="call ctx.progress(0.3) or ctx.progress((3, 10))")
        value = {"fraction": float(amount)}
    if message is not None:
        value["message"] = str(message)[:MAX_MESSAGE]
    if data is not None:
        value["data"] = data
        try:
            json.dumps(data, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"progress data must be JSON-serializable: {exc}") from None
    return value
