"""Small validators for configuration values: each raises ConfigError naming the fix."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .durations import parse_duration
from .exceptions import ConfigError

SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
TYPE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
RESERVED_SCHEMAS = {"public", "information_schema", "cron", "net", "vault", "extensions", "auth"}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


def positive_duration(value: Any, what: str) -> timedelta:
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, str):
        delta = parse_duration(value, what=what)
    else:
        raise ConfigError(f"{what} must be a duration string such as \"30s\", got {value!r}")
    if delta < timedelta(seconds=1):
        raise ConfigError(f"{what} must be at least 1s, got {value!r}")
    return delta


def schema(value: Any) -> str:
    if not isinstance(value, str) or not SCHEMA_RE.match(value) or value.startswith("pg_"):
        raise ConfigError(
            f"schema {value!r} is not a valid schema name",
            hint="use lower-case letters, digits and underscores, starting with a letter (e.g. jobkit)",
        )
    if value in RESERVED_SCHEMAS:
        raise ConfigError(
            f"schema {value!r} is reserved or exposed through the Data API",
            hint="use a schema of jobkit's own, e.g. jobkit",
        )
    return value


def type_name(value: str) -> str:
    if not TYPE_RE.match(value):
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
    match = _RATE_RE.match(value) if isinstance(value, str) else None
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"{what}: {value!r} is not a rate",
                          hint='write it like "60/min", "10/s" or "1000/h"')
    return float(match.group(1)) / _PER[match.group(2)]
