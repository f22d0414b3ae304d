"""Small validators for configuration values: each raises ConfigError naming the fix."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .durations import MAX_TIME, format_duration, format_time, parse_duration
from .exceptions import ConfigError
from .names import MAX_NAME_BYTES, longest_derived

SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]*")
TYPE_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
RESERVED_SCHEMAS = {"public", "information_schema", "cron", "net", "vault", "extensions", "auth"}
_RATE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*")
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


def positive_duration(value: Any, what: str, at_most: timedelta | None = None) -> timedelta:
    """A duration of at least 1 s (and at most ``at_most``, the limit of what it becomes)."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, str):
        delta = parse_duration(value, what=what)
    else:
        raise ConfigError(f"{what} must be a duration string such as \"30s\", got {value!r}")
    if delta < timedelta(seconds=1):
        raise ConfigError(f"{what} must be at least 1s, got {value!r}")
    if at_most is not None and delta > at_most:
        raise ConfigError(f"{what} must be at most {format_duration(at_most)}, got {value!r}")
    return delta


def schema(value: Any) -> str:
    if not isinstance(value, str) or not SCHEMA_RE.fullmatch(value) or value.startswith("pg_"):
        raise ConfigError(
            f"schema {value!r} is not a valid schema name",
            hint="use lower-case letters, digits and underscores, starting with a letter (e.g. jobkit)",
        )
    if len(value) > MAX_NAME_BYTES:
        raise ConfigError(f"schema {value!r} is {len(value)} characters long; PostgreSQL names end at "
                          f"{MAX_NAME_BYTES}", hint="use a shorter schema")
    if value in RESERVED_SCHEMAS:
        raise ConfigError(
            f"schema {value!r} is reserved or exposed through the Data API",
            hint="use a schema of jobkit's own, e.g. jobkit",
        )
    return value


def derived_names(schema: str, schedules: Collection[str], database: str | None) -> None:
    """Refuse a schema whose longest derived name (names.py: NOTIFY channels, pg_cron job names of
    ``schedules`` in ``database``) goes over PostgreSQL's 63 bytes, naming it and the longest
    schema that fits."""
    what, name = longest_derived(schema, schedules, database)
    size = len(name.encode())
    if size <= MAX_NAME_BYTES:
        return
    room = MAX_NAME_BYTES - (size - len(schema))
    cron = what.startswith("pg_cron")
    where = "" if not cron else f" in database {database}" if database else (
        " (? is the database name: 1 byte at the least)")
    raise ConfigError(
        f"schema {schema!r} is too long: jobkit derives the {what} {name!r}{where} from it, {size} bytes; "
        f"PostgreSQL names end at {MAX_NAME_BYTES}",
        hint=(f"use a shorter schema setting (at most {room} characters here)" if room > 0
              else "use a shorter schema setting")
        + (", or shorter schedule names" if cron else ""))


def stored_time(value: Any, what: str) -> datetime:
    """A time jobkit can store and show again: before MAX_TIME (a naive time is read as UTC)."""
    if not isinstance(value, datetime):
        raise ConfigError(f"{what} must be a datetime, got {type(value).__name__}",
                          hint="pass a timezone-aware datetime, e.g. datetime.now(UTC) + timedelta(hours=1)")
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not aware < MAX_TIME:
        raise ConfigError(f"{what} {value.isoformat()} is too far ahead: jobkit's times end before "
                          f"{format_time(MAX_TIME)}", hint=f"give a {what} before the year 9999 ends")
    return value


def type_name(value: Any) -> str:
    if not isinstance(value, str) or not TYPE_RE.fullmatch(value):
        raise ConfigError(
            f"job type {value!r} is not a valid name",
            hint="use 1-100 letters, digits, and _ . : -",
        )
    return value


def table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table, got {value!r}")
    return value


def only(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r}",
            hint=f"allowed keys: {', '.join(sorted(allowed))}",
        )


def opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{what} must be a string, got {value!r}")


def integer(value: Any, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(f"{what} must be an integer from {low} to {high}, got {value!r}")
    return value


def rate(value: Any, what: str) -> float:
    """``"60/min"``, ``"10/s"``, ``"1000/h"`` -> tokens per second."""
    match = _RATE_RE.fullmatch(value) if isinstance(value, str) else None
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"{what}: {value!r} is not a rate",
                          hint='write it like "60/min", "10/s" or "1000/h"')
    return float(match.group(1)) / _PER[match.group(2)]
