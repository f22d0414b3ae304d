"""The names jobkit derives from its settings, in one place: NOTIFY channels and pg_cron job names.

Each is derived here and only here, so validation (:func:`longest_derived`) measures the very
names the worker, the waiters and deploy use. PostgreSQL cuts identifiers and channel names at
NAMEDATALEN - 1 = 63 bytes, and pg_cron 1.4 stores a job name as ``name`` (63 bytes too).
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_NAME_BYTES = 63  # NAMEDATALEN - 1: identifiers, NOTIFY channels, pg_cron 1.4's jobname


def wake_channel(schema: str) -> str:
    """The channel the database NOTIFYs wake-ups on (``--listen`` workers LISTEN to it)."""
    return f"{schema}_wake"


def done_channel(schema: str) -> str:
    """The channel a finishing job is announced on (jobkit.wait LISTENs to it)."""
    return f"{schema}_done"


def cron_prefix(database: str, cron_database: str, schema: str) -> str:
    """What jobkit's pg_cron job names start with: ``jobkit:`` for schema jobkit in pg_cron's own
    database, else the database and schema too, so installations sharing one pg_cron stay apart."""
    if database == cron_database and schema == "jobkit":
        return "jobkit:"
    return f"jobkit:{database}.{schema}:"


def cron_job_name(prefix: str, schedule: str) -> str:
    return prefix + schedule


def derived(schema: str, schedules: Iterable[str], database: str | None) -> list[tuple[str, str]]:
    """(what, name) for every name jobkit derives from ``schema``: its channels, and the cron job
    name of each schedule in ``database`` (None: not known yet, and the shortest possible name,
    one byte, stands in for it: ``?``). pg_cron is taken to run in that database (as on Supabase and the local
    cluster), the shortest case: what this refuses can never fit, and deploy checks the exact
    names against the real pg_cron before it changes anything."""
    names = [("NOTIFY channel", wake_channel(schema)), ("NOTIFY channel", done_channel(schema))]
    prefix = cron_prefix(database or "?", database or "?", schema)
    names += [("pg_cron job name", cron_job_name(prefix, s)) for s in schedules]
    return names


def longest_derived(schema: str, schedules: Iterable[str], database: str | None) -> tuple[str, str]:
    """The longest (in bytes) of :func:`derived`."""
    return max(derived(schema, schedules, database), key=lambda pair: len(pair[1].encode()))
