"""Human durations: ``"30s"``, ``"5m"``, ``"1h30m"``, ``"7d"``, ``"250ms"`` <-> timedelta."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .exceptions import ConfigError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
MAX_SECONDS = 36500 * 86400.0  # 100 years: far past any setting, well inside timedelta and interval
#: Times jobkit stores end before this (the jobs_scheduled_for_year_9999 constraint, migration 0012):
#: Python's datetime ends with the year 9999, and a time just before the end of that year would,
#: read in a time zone east of UTC, already be in the year 10000.
MAX_TIME = datetime(9999, 12, 31, tzinfo=UTC)


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """Parse ``"1h30m"`` style text; raise ConfigError naming ``what`` when it is not one."""
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned or _PART.sub("", cleaned) != "":
        raise ConfigError(
            f"{what}: {text!r} is not a duration",
            hint="write it as a number and a unit: 250ms, 30s, 5m, 2h, 7d (or combined: 1h30m)",
        )
    seconds = sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(cleaned))
    if seconds > MAX_SECONDS:
        raise ConfigError(f"{what}: {text!r} is too long a duration",
                          hint="durations go up to 100 years (36500d)")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact ``"1h30m"`` form of a timedelta (milliseconds kept)."""
    total_ms = round(value.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    out, rest = [], total_ms
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, rest = divmod(rest, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def format_time(value: datetime | None) -> str:
    """Times as jobkit prints them everywhere (CLI, dashboard): ISO 8601 in UTC, to the second;
    "-" for none."""
    if value is None:
        return "-"
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
