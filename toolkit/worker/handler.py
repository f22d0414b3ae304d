"""A registered handler as the worker runs it (Handler), and what the worker reads of a Registry
(Handlers). The Registry (handlers.py) builds Handlers; the Drainer and jobkit.testing take any
``Handlers``, so the worker never imports handlers.py (whose ``run_inline`` runs the worker)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from ..config import Backoff
from ..retries import Permanent

HandlerFunc = Callable[[Any, Any], Any]
#: The lease of a job whose type has no handler in this worker (its attempt fails at once).
UNKNOWN_LEASE = timedelta(minutes=5)


@dataclass(frozen=True)
class Handler:
    """A registered handler and its per-type options (None = the database's type settings)."""

    type: str
    func: HandlerFunc
    is_async: bool
    timeout: timedelta
    lease: timedelta
    max_attempts: int | None = None
    backoff: Backoff | None = None
    rate_limit: str | None = None
    payload_model: Any = None  # a pydantic model class the payload is validated into

    def parse(self, payload: Any) -> Any:
        """The payload the handler receives: validated into ``payload_model`` when there is one;
        Permanent (never retried) when it does not validate."""
        if self.payload_model is None:
            return payload
        try:
            return self.payload_model.model_validate(payload)
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, or the model's own check
            errors = getattr(exc, "errors", None)
            detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in errors()) \
                if callable(errors) else str(exc)
            raise Permanent(f"invalid payload for {self.type} ({self.payload_model.__name__}): "
                            f"{detail}") from None

    def retry_delay(self, attempt: int) -> timedelta | None:
        """The handler's own backoff after a failed ``attempt``; None = the database's curve."""
        if self.backoff is None:
            return None
        b = self.backoff
        seconds = min(b.cap.total_seconds(), b.base.total_seconds() * b.factor ** min(attempt - 1, 100))
        return timedelta(seconds=max(1.0, seconds * (1 + b.jitter * (2 * random.random() - 1))))


class Handlers(Protocol):
    """What the worker reads of a Registry."""

    def get(self, job_type: str) -> Handler | None: ...

    def __iter__(self) -> Iterator[Handler]: ...

    @property
    def types(self) -> list[str]: ...
