"""Shared CLI plumbing: the state object (which opens each command's App), the --db-url option."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click
from rich.console import Console

from ..app import App
from ..config import Settings, load_settings, metrics_token_from_env, worker_secret_from_env
from ..durations import format_time

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    config_path: str | None = None
    verbose: bool = False

    def settings(self, db_url: str | None = None) -> Settings:
        return load_settings(self.config_path, db_url=db_url)

    def app(
        self, db_url: str | None = None, *, application_name: str = "jobkit", deployed: bool = True
    ) -> App:
        """The command's App: its settings and one database session, closed when the command ends.
        Commands that work on jobkit's schema (``deployed``) first check that it is deployed."""
        app = App(self.settings(db_url), application_name=application_name, deployed=deployed)
        click.get_current_context().call_on_close(app.close)
        return app

    def worker_secret(self) -> str | None:
        return worker_secret_from_env()

    def metrics_token(self) -> str | None:
        return metrics_token_from_env()


pass_state = click.make_pass_decorator(State, ensure=True)


def db_url_option(func: F) -> F:
    return click.option(
        "--db-url", metavar="URL",
        help="Database URL (default: $JOBKIT_DB_URL, $SUPABASE_DB_URL, $DATABASE_URL, "
        "jobkit.toml, then the local cluster).",
    )(func)


def console(err: bool = False) -> Console:
    """A rich console; plain text (no colour) and wide tables when the output is not a terminal
    (200 columns, so that no cell of `jobkit status` wraps; $COLUMNS when set)."""
    probe = Console(stderr=err)
    return Console(stderr=err, highlight=False, soft_wrap=True,
                   width=None if probe.is_terminal or os.environ.get("COLUMNS") else 200)


def to_json(value: Any) -> str:
    """Every command's --json output: times as everywhere (ISO 8601 UTC, to the second), durations
    as seconds (a number), anything else (ids) as its text."""
    return json.dumps(value, indent=2, default=_json_value)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def timestamp(value: datetime | None) -> str:
    """Every command prints times the same way (durations.format_time)."""
    return format_time(value)
