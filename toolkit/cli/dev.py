"""`jobkit dev`: the local database with jobkit deployed, and the bounded demo."""

from __future__ import annotations

import json

import click
from rich.table import Table

from ..connector import Database
from ..demo import Outcome, run_demo
from ..deploy import deploy
from ..exceptions import JobkitError
from ..localdb import LocalCluster
from .common import State, console, pass_state


@click.command()
@click.option("--demo", is_flag=True, help="Run the bounded demo: enqueue, drain, verify, exit.")
@pass_state
def dev(state: State, demo: bool) -> None:
    """Start the local database, deploy jobkit into it; with --demo, run the demo jobs.

    \b
    Example:
      jobkit dev --demo
    """
    settings = state.settings()
    url = settings.db_url or LocalCluster(settings.home).start()
    db = Database(url, application_name="jobkit dev")
    report = deploy(db, settings, echo=click.echo)
    click.echo(f"database {db.display_url}: schema {settings.schema} at {report.head}")
    if not demo:
        click.echo("ready: enqueue with `select jobkit.enqueue('type', '{}')`; stop with `jobkit db stop`")
        return
    outcomes = run_demo(db, settings.schema, click.echo)
    _show(outcomes)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise JobkitError(f"{len(bad)} demo job(s) ended in an unexpected state")
    click.echo(f"demo ok: {len(outcomes)} jobs reached their expected states")


def _show(outcomes: list[Outcome]) -> None:
    table = Table(title="demo jobs")
    for column in ("job", "tries", "status", "result / last error"):
        table.add_column(column)
    for o in outcomes:
        detail = json.dumps(o.job.result) if o.job.status == "completed" else o.job.last_error
        status = o.job.status.value if o.ok else f"{o.job.status.value} (expected {o.expect.value})"
        table.add_row(o.label, str(o.job.attempts), status, detail or "")
    console().print(table)


COMMANDS = (dev,)
