"""Sleeps and waits that free the worker (issue 25): ``ctx.sleep``, ``ctx.sleep_until``,
``ctx.wait_for_event``, ``ctx.wait_any`` and ``ctx.wait_for_jobs``.

A wait is a durable step of its own kind. Its occurrence is counted like a step's (the n-th wait of
that name in one execution of the handler). When its outcome is stored (``job_steps``, kind
'wait'), the call returns it at once: the event, the jobs' states, or None (a sleep's end, a
timeout). Otherwise it raises :class:`Suspend`, a control-flow signal (a BaseException, so that a
handler's ``except Exception`` does not swallow it): the worker records it as the attempt's end
(``suspend``, fenced like a completion; the attempt is not consumed) and the job waits in the state
'waiting', holding no worker. When what it waits for arrives, the job is pending again and its
handler replays: completed steps return their stored results, and the wait returns its outcome.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ..durations import MAX_TIME, parse_duration
from ..exceptions import ConfigError
from ..jobs import WaitSpec

Duration = str | float | int | timedelta
MAX_KEY = 1000


class Suspend(BaseException):  # noqa: N818 - a signal, not an error
    """The handler waits: its attempt ends here and the job waits for ``wait`` (see the module).
    Raised by the ctx's waits; do not catch it (it is no Exception, like asyncio.CancelledError)."""

    def __init__(self, wait: WaitSpec) -> None:
        super().__init__(f"waiting for {wait.kind} ({wait.step} #{wait.occurrence})")
        self.wait = wait


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event a wait waits for: its name and key (``ctx.event(name, key=...)``, for wait_any)."""

    name: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """An emitted event, as a wait returns it: its name, key, data, id and generation (the n-th
    event of its name and key)."""

    name: str
    key: str | None
    data: Any
    id: int
    generation: int
    emitted_at: str | None = None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Event:
        return cls(str(value["event"]), value.get("key"), value.get("data"), int(value["id"]),
                   int(value.get("generation") or 1), value.get("emitted_at"))


def event_spec(name: str, key: str | int | None = None) -> EventSpec:
    """An EventSpec, checked: a name of 1 to 200 characters, a key of at most 1000."""
    if not isinstance(name, str) or not 1 <= len(name) <= 200 or "\x1f" in name:
        raise ConfigError(f"an event name must be a string of 1 to 200 characters, got {name!r}",
                          hint='wait for ctx.wait_for_event("order.shipped", key=order_id)')
    if key is not None and not isinstance(key, str | int) or isinstance(key, bool):
        raise ConfigError(f"an event key must be a string or an integer, got {key!r}",
                          hint='pass key=str(order_id)')
    text = None if key is None else str(key)
    if text is not None and len(text) > MAX_KEY:
        raise ConfigError(f"an event key must be at most {MAX_KEY} characters",
                          hint="use an id, not a document, as the key")
    return EventSpec(name, text)


def delay_of(value: Duration, what: str) -> timedelta:
    """``"3d"``, seconds or a timedelta, as a non-negative timedelta."""
    if isinstance(value, timedelta):
        delay = value
    elif isinstance(value, str):
        delay = parse_duration(value, what=what)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{what}: {value!r} is not a duration", hint='write "30s", "3d" or 30')
        delay = timedelta(seconds=min(float(value), 36500 * 86400.0)) if value > 0 else timedelta(0)
    else:
        raise ConfigError(f"{what}: {value!r} is not a duration", hint='write "30s", "3d", 30 or a timedelta')
    if delay < timedelta(0):
        raise ConfigError(f"{what}: {value!r} is negative", hint="wait for a duration of 0 or more")
    return min(delay, timedelta(days=36500))


def until_of(when: datetime) -> datetime:
    """An aware time (a naive one is refused: its time zone would be a guess)."""
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ConfigError(f"ctx.sleep_until needs an aware datetime, got {when!r}",
                          hint="pass datetime(..., tzinfo=UTC) or datetime.now(UTC) + timedelta(...)")
    return min(when.astimezone(UTC), MAX_TIME)


def job_ids_of(ids: Iterable[UUID | str]) -> tuple[UUID, ...]:
    out: list[UUID] = []
    try:
        for i in ids:
            out.append(i if isinstance(i, UUID) else UUID(str(i)))
    except (TypeError, ValueError):
        raise ConfigError(f"ctx.wait_for_jobs needs job ids, got {ids!r}",
                          hint="pass the ids jobkit.enqueue returned") from None
    if not out:
        raise ConfigError("ctx.wait_for_jobs needs at least one job id",
                          hint="pass the ids jobkit.enqueue returned")
    return tuple(dict.fromkeys(out))


def outcome(kind: str, value: Any) -> Any:
    """A stored wait outcome as the wait returns it."""
    if value is None:
        return None
    if kind == "event":
        return Event.from_json(value)
    if kind == "jobs":
        return {UUID(k): v for k, v in (value.get("jobs") or {}).items()}
    return None
