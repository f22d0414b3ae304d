"""pg_cron schedule strings: from ``--every 5m``, validated against what pg_cron really accepts.

pg_cron takes a 5-field cron expression, an ``@keyword``, or ``'N seconds'`` (1-59, pg_cron >= 1.5).
It reads 5 fields and silently ignores the rest, so the seed's 6-field ``*/30 * * * * *`` would run
every 30 *minutes*: such expressions are refused here with the right suggestion.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from croniter import CroniterBadDateError, croniter

from ..durations import parse_duration
from ..exceptions import ConfigError

Version = tuple[int, int]
_SECONDS_RE = re.compile(r"^\s*(\d+)\s+seconds?\s*$", re.IGNORECASE)
_KEYWORDS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@reboot"}
_MINUTE_STEPS = {1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30}
_HOUR_STEPS = {1, 2, 3, 4, 6, 8, 12}


def every(text: str) -> str:
    """``"30s"``, ``"5m"``, ``"2h"``, ``"1d"`` -> a pg_cron schedule that runs exactly that often."""
    seconds = int(parse_duration(text, what="--every").total_seconds())
    if 1 <= seconds <= 59:
        return f"{seconds} seconds"
    minutes, rest = divmod(seconds, 60)
    if rest == 0 and minutes in _MINUTE_STEPS:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours, rest = divmod(seconds, 3600)
    if rest == 0 and hours in _HOUR_STEPS:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    if seconds == 86400:
        return "0 0 * * *"
    if seconds == 7 * 86400:
        return "0 0 * * 0"
    raise ConfigError(
        f"--every {text} does not divide an hour or a day evenly",
        hint="use 1-59s, a minute step dividing 60 (5m, 15m), an hour step dividing 24, 1d or 7d, "
        "or give a cron expression with --cron",
    )


def validate(schedule: str, version: Version | None = None) -> str:
    """Return ``schedule`` normalised, or raise ConfigError naming the fix. ``version`` is the
    server's pg_cron (major, minor); None checks syntax only."""
    text = " ".join(schedule.split())
    seconds = _SECONDS_RE.match(text)
    if seconds:
        return _validate_seconds(int(seconds.group(1)), version)
    if text.lower() in _KEYWORDS:
        return text.lower()
    fields = text.split(" ")
    if len(fields) == 6:
        raise ConfigError(
            f"{schedule!r} has 6 fields: pg_cron reads only the first 5 and would run it every "
            f"{_minutes_phrase(fields[0])}",
            hint=f"for sub-minute schedules write {_seconds_suggestion(fields[0])!r} (pg_cron >= 1.5)",
        )
    if len(fields) != 5:
        raise ConfigError(
            f"{schedule!r} is not a pg_cron schedule",
            hint="use 5 cron fields ('*/5 * * * *'), an @keyword (@hourly) or 'N seconds'",
        )
    return _validate_fields(text, fields, version)


def next_run(schedule: str, after: datetime) -> datetime | None:
    """When pg_cron next runs ``schedule`` after ``after`` (None for @reboot)."""
    seconds = _SECONDS_RE.match(schedule)
    if seconds:
        return after + timedelta(seconds=int(seconds.group(1)))
    if schedule == "@reboot" or "$" in schedule:
        return None
    try:
        value: datetime = croniter(schedule, after, max_years_between_matches=8).get_next(datetime)
    except (CroniterBadDateError, ValueError, KeyError):  # one that can never fire (31 February)
        return None
    return value


def _validate_seconds(count: int, version: Version | None) -> str:
    if not 1 <= count <= 59:
        raise ConfigError(
            f"'{count} seconds' is out of range: pg_cron accepts 1 to 59 seconds",
            hint="for a minute or more use a cron expression, e.g. '* * * * *'",
        )
    if version is not None and version < (1, 5):
        raise ConfigError(
            f"'{count} seconds' needs pg_cron 1.5 or newer; this server has pg_cron "
            f"{version[0]}.{version[1]}, which runs minute schedules only",
            hint="use '* * * * *' (every minute) here; Supabase ships pg_cron 1.6",
        )
    return f"{count} seconds"


def _validate_fields(text: str, fields: list[str], version: Version | None) -> str:
    if "$" in fields[2]:
        if version is not None and version < (1, 6):
            raise ConfigError(f"{text!r}: '$' (last day of month) needs pg_cron 1.6 or newer")
        return text
    if not croniter.is_valid(text):
        raise ConfigError(
            f"{text!r} is not a valid cron expression",
            hint="fields are minute hour day-of-month month day-of-week, e.g. '*/5 * * * *'",
        )
    if next_run(text, datetime(2000, 1, 1)) is None:  # a leap-year start: 29 February can fire
        raise ConfigError(
            f"{text!r} never fires (no date matches its day-of-month and month)",
            hint="check the day against the month, e.g. '0 0 28 2 *' for 28 February",
        )
    return text


def _minutes_phrase(first: str) -> str:
    step = first.removeprefix("*/")
    if first.startswith("*/") and step.isdigit():
        return f"{step} minutes"
    return "minute matching its first field"


def _seconds_suggestion(first: str) -> str:
    step = first.removeprefix("*/")
    return f"{step} seconds" if first.startswith("*/") and step.isdigit() else "30 seconds"


def parse_version(extversion: str | None) -> Version | None:
    """pg_extension.extversion ('1.4-1', '1.6') -> (1, 4)."""
    match = re.match(r"^(\d+)\.(\d+)", extversion or "")
    return (int(match.group(1)), int(match.group(2))) if match else None
