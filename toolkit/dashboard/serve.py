"""Serving the dashboard on its own: the start-up checks, the port, then uvicorn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import Settings
from ..exceptions import ConfigError
from ..serving import bind, server
from ..serving import url as served_at
from .app import Dashboard
from .auth import AuthConfig, is_loopback


@dataclass(frozen=True)
class DashboardOptions:
    host: str = "127.0.0.1"
    port: int = 8780
    read_only: bool = False
    token: str | None = None
    jwt_secret: str | None = None
    jwt_claim: str = "role=service_role"

    def auth(self) -> AuthConfig:
        return AuthConfig(token=self.token, jwt_secret=self.jwt_secret, jwt_claim=self.jwt_claim)


def check(options: DashboardOptions) -> None:
    """Refuse a non-loopback address without authentication, and a too-short token."""
    auth = options.auth()
    if auth.mode == "none" and not is_loopback(options.host):
        raise ConfigError(
            f"refusing to serve the dashboard on {options.host} without authentication",
            hint="set JOBKIT_DASHBOARD_TOKEN (or JOBKIT_DASHBOARD_JWT_SECRET), or keep --host 127.0.0.1")
    if options.token is not None and len(options.token) < 16:
        raise ConfigError("JOBKIT_DASHBOARD_TOKEN is shorter than 16 characters",
                          hint="use a long random token, e.g. `openssl rand -hex 24`")
    if options.jwt_secret is not None and len(options.jwt_secret) < 32:
        raise ConfigError("JOBKIT_DASHBOARD_JWT_SECRET is shorter than 32 characters",
                          hint="use the project's JWT secret (Supabase: Project Settings > API > JWT secret)")
    auth.claim()


def serve(url: str, settings: Settings, options: DashboardOptions,
          echo: Callable[[str], None] = print) -> None:
    """Check, connect, take the port, then say where it is served and serve until Ctrl-C."""
    check(options)
    dashboard = Dashboard(url, settings, auth=options.auth(), read_only=options.read_only)
    try:
        dashboard.open()  # fail now, with the connection error, not at the first page
        with bind(options.host, options.port) as sock:  # a busy port: one line, exit 1, no URL printed
            echo(f"jobkit dashboard on {served_at(options.host, sock)} ({options.auth().mode} auth"
                 f"{', read-only' if options.read_only else ''}); Ctrl-C stops it")
            server(dashboard.app, log_level="warning", access_log=False).run(sockets=[sock])
    finally:
        dashboard.close()
