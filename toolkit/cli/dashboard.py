"""`jobkit dashboard`: the web dashboard, served locally (or behind auth) with uvicorn."""

from __future__ import annotations

import click

from ..config import dashboard_auth_from_env
from ..dashboard.serve import DashboardOptions, serve
from .common import State, db_url_option, pass_state


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs JOBKIT_DASHBOARD_TOKEN or "
                   "JOBKIT_DASHBOARD_JWT_SECRET.")
@click.option("--port", type=click.IntRange(1, 65535), default=8780, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything, change nothing (no actions).")
@click.option("--jwt-claim", default="role=service_role", show_default=True, metavar="PATH=VALUE",
              help="With JOBKIT_DASHBOARD_JWT_SECRET: the claim a Supabase JWT must hold.")
@db_url_option
@pass_state
def dashboard(state: State, host: str, port: int, read_only: bool, jwt_claim: str,
              db_url: str | None) -> None:
    """Serve the web dashboard: queues, jobs, actions, schedules, rate limits.

    \b
    Examples:
      jobkit dashboard                      # http://127.0.0.1:8780, no sign-in on loopback
      jobkit dashboard --read-only
      JOBKIT_DASHBOARD_TOKEN=... jobkit dashboard --host 0.0.0.0
      JOBKIT_DASHBOARD_JWT_SECRET=... jobkit dashboard --host 0.0.0.0 --jwt-claim app_metadata.jobkit=admin
    """
    token, jwt_secret = dashboard_auth_from_env()
    app = state.app(db_url, application_name="jobkit dashboard")
    app.db.shared()  # reachable, and jobkit deployed at this version: one line and exit 1 if not
    options = DashboardOptions(host=host, port=port, read_only=read_only, token=token,
                               jwt_secret=jwt_secret, jwt_claim=jwt_claim)
    serve(app.db.url, app.settings, options, echo=lambda line: click.echo(line, err=True))
