"""How the pages say things: times relative to now with the exact UTC time beside them, and the
name of what the dashboard looks at (the Supabase project, or the database and host) for its top bar."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment
from psycopg.conninfo import conninfo_to_dict

_SUPABASE_HOSTS = (".supabase.co", ".supabase.com")


def install(env: Environment) -> None:
    env.filters["ago"] = ago
    env.filters["utc"] = utc
    env.filters["iso"] = iso


def ago(value: Any, now: datetime | None = None) -> str:
    """'12 s ago', '3 min ago', '5 h ago', '2 d ago', or 'in 4 min' for a time to come; '-' for none."""
    if not isinstance(value, datetime):
        return "-"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    text = _span(abs(seconds))
    if text == "now":
        return text
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def _span(seconds: float) -> str:
    if seconds < 1:
        return "now"
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def utc(value: Any) -> str:
    """The exact time, for a title: '2026-12-06 14:03:12.123 UTC'."""
    if not isinstance(value, datetime):
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def iso(value: Any) -> str:
    """For <time datetime=...> (the page's script counts down and re-words from it)."""
    return value.astimezone(UTC).isoformat() if isinstance(value, datetime) else ""


def project_name(url: str) -> str:
    """What the top bar calls this database: the Supabase project's ref when the URL is a
    Supabase one (db.<ref>.supabase.co, or the pooler's user postgres.<ref>), else
    'database on host'. Never the password or the user."""
    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a top bar's words; the pool reports a bad URL itself
        return "database"
    host = str(parts.get("host") or "").split(",")[0]
    dbname = str(parts.get("dbname") or parts.get("user") or "postgres")
    user = str(parts.get("user") or "")
    if host.endswith(_SUPABASE_HOSTS):
        if host.startswith("db.") and host.count(".") >= 3:
            return f"Supabase {host.split('.')[1]}"
        if user.startswith("postgres.") and len(user) > len("postgres."):
            return f"Supabase {user.split('.', 1)[1]}"
    if not host or host.startswith("/"):
        return dbname
    return f"{dbname} on {host}"
