"""Which database a command talks to: the configured URL, else the running local cluster."""

from __future__ import annotations

from .config import Settings
from .connector import Database
from .exceptions import ConfigError


def database(settings: Settings, *, application_name: str = "jobkit") -> Database:
    """The Database for ``settings`` (see config.py for the URL precedence)."""
    return Database(resolve_url(settings), application_name=application_name)


def resolve_url(settings: Settings) -> str:
    if settings.db_url:
        return settings.db_url
    from .ops.localdb import LocalCluster

    status = LocalCluster(settings.home).status()
    if status.running and status.url:
        return status.url
    raise ConfigError(
        "no database URL configured",
        hint=(
            "pass --db-url, set JOBKIT_DB_URL (or SUPABASE_DB_URL, DATABASE_URL), "
            "or start the local database with `jobkit db start`"
        ),
    )
