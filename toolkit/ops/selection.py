"""Which jobs an operator means: a filter (the dashboard's jobs page, the CLI's --type/--status/...
options), parsed, checked and turned into query parameters.

A filter is plain data (it is stored in the audit log as JSON), so "every job matching the filter"
means the same thing on the page, in the confirmation count, in every batch of an action, and in
the CLI (toolkit/ops/operate.py acts on it for both).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ..connector import json_param
from ..exceptions import ConfigError

FIELDS = ("type", "status", "key", "since", "until", "worker", "error", "payload")
#: Every state the jobs.status check allows (0018), in the order a job usually meets them:
#: waiting (a durable job's sleep or wait) and blocked (a graph's child) are not claimable.
STATES = ("pending", "waiting", "blocked", "processing", "completed", "failed", "dead", "cancelled")
_WORDS = {"type": "type is {}", "status": "status is {}", "key": "concurrency key is {}",
          "since": "created at or after {}", "until": "created before {}", "worker": "worker is {}",
          "error": "last error contains {}", "payload": "payload contains {}"}
MAX_FIELD = 1000  # characters of one filter field (a payload filter is JSON: more room)
MAX_PAYLOAD = 10_000

#: The states each action applies to (the SQL functions check them again, row by row).
ACTION_STATES: dict[str, tuple[str, ...]] = {
    "retry": ("failed", "dead", "cancelled"),
    "cancel": ("pending", "processing"),
    "delete": ("pending", "completed", "failed", "dead", "cancelled"),
}


@dataclass(frozen=True)
class JobFilter:
    """What the jobs page shows; empty fields do not filter."""

    type: str = ""
    status: str = ""
    key: str = ""  # the concurrency key
    since: str = ""  # ISO 8601, on created_at
    until: str = ""
    worker: str = ""
    error: str = ""  # a substring of the last error, any case
    payload: str = ""  # a JSON object the payload contains

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> JobFilter:
        found = cls(**{name: _field(name, values.get(name)) for name in FIELDS})
        found.params()  # raises on bad input before anything runs
        return found

    @property
    def empty(self) -> bool:
        return not any(asdict(self).values())

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v}

    def query_string(self) -> str:
        from urllib.parse import urlencode

        return urlencode(self.as_dict())

    def describe(self) -> str:
        """The filter in words, as the confirmation page and the CLI say it: 'type is send_email
        and status is dead' ('every job (no filter)' when empty)."""
        if self.empty:
            return "every job (no filter)"
        parts = []
        for name, value in self.as_dict().items():
            shown = value if name in ("type", "status") else repr(value)
            parts.append(_WORDS[name].format(shown))
        return " and ".join(parts)

    def params(self) -> dict[str, Any]:
        """The bound parameters of the dash_jobs_* queries (None = no filter)."""
        if self.status and self.status not in STATES:
            raise ConfigError(f"unknown status {self.status!r}", hint=f"one of {', '.join(STATES)}")
        return {
            "type": self.type or None, "status": self.status or None, "key": self.key or None,
            "since": _time(self.since, "since"), "until": _time(self.until, "until"),
            "worker": self.worker or None, "error": self.error or None,
            "payload": _payload(self.payload),
        }


def parse_ids(values: list[str]) -> list[UUID]:
    try:
        return [UUID(v) for v in values]
    except ValueError:
        bad = next(v for v in values if not _is_uuid(v))
        raise ConfigError(f"{bad[:60]!r} is not a job id",
                          hint="job ids are UUIDs; see `jobkit jobs list` or the jobs page") from None


def _is_uuid(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


def _field(name: str, value: Any) -> str:
    text = str(value or "").strip()
    limit = MAX_PAYLOAD if name == "payload" else MAX_FIELD
    if len(text) > limit:
        raise ConfigError(f"the {name} filter is longer than {limit} characters",
                          hint="filter on something shorter")
    if "\x00" in text:
        raise ConfigError(f"the {name} filter contains a NUL character", hint="remove it")
    return text


def _time(text: str, name: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{name}: {text!r} is not a time",
                          hint="use ISO 8601, e.g. 2026-12-03T09:00 (UTC unless it names an offset)",
                          ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _payload(text: str) -> Any:
    if not text:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConfigError("payload filter is nested too deeply",
                          hint='write a JSON object the payload contains, e.g. {"user_id": 42}') from None
    except ValueError as exc:  # JSONDecodeError, or a number of more than 4,300 digits
        raise ConfigError(f"payload filter is not JSON: {getattr(exc, 'msg', None) or exc}",
                          hint='write a JSON object the payload contains, e.g. {"user_id": 42}') from None
    if not isinstance(value, dict):
        raise ConfigError("payload filter must be a JSON object",
                          hint='e.g. {"user_id": 42} matches payloads that contain it')
    return json_param(value)
