"""What a drain produced: its summary, a handler's result, and failures ready to record."""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass
from typing import Any

from .handlers import Handler, Permanent, Retry
from .jobs import Claimed
from .manager import Failure

MAX_ERROR = 8000


@dataclass
class DrainSummary:
    """What one drain did."""

    type: str
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    snoozed: int = 0
    released: int = 0
    lost: int = 0  # fenced out: the attempt no longer held the job when it finished

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def plain(value: Any) -> bool:
    """A result that needs no JSON check: None, a string, an int, a bool or a finite float."""
    kind = type(value)
    return value is None or kind is str or kind is int or kind is bool or (
        kind is float and math.isfinite(value))


def failure(job: Claimed, handler: Handler | None, error: BaseException) -> Failure:
    text = error_text(error)
    max_attempts = handler.max_attempts if handler else None
    if isinstance(error, Permanent):
        return Failure(job.id, job.attempts, text, permanent=True, max_attempts=max_attempts)
    retry_in = (
        error.after if isinstance(error, Retry) else (handler.retry_delay(job.attempts) if handler else None)
    )
    return Failure(job.id, job.attempts, text, retry_in=retry_in, max_attempts=max_attempts)


def error_text(error: BaseException) -> str:
    if error.__traceback__ is None:
        text = f"{type(error).__name__}: {error}"
    else:
        text = "".join(traceback.format_exception(error))
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR // 2] + "\n...\n" + text[-MAX_ERROR // 2 :]
