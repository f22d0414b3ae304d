"""`jobkit triggers`: the row triggers deploy manages ([triggers.<name>] in jobkit.toml)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click
from rich.table import Table

from ..ops import triggers as triggers_api
from .common import State, console, db_url_option, pass_state


@click.group()
def triggers() -> None:
    """Row triggers: a row change on an app table becomes a job in the same transaction.

    \b
    Example (jobkit.toml; `jobkit deploy` makes the trigger):
      [triggers.welcome]
      table = "auth.users"
      on = ["insert"]
      type = "send_welcome"
      payload = ["id", "email"]
    (or emit = "user.created" instead of type: an event per row, keyed by the primary key)
    """


@triggers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def list_(state: State, as_json: bool, db_url: str | None) -> None:
    """Each managed trigger: table, events, condition, job type, state and jobs made in the last hour.

    An emit trigger shows its event (``event order.paid``) in place of the job type, and the events
    of that name emitted in the last hour (by it or anyone else) in place of its jobs.

    \b
    Examples:
      jobkit triggers list
      jobkit triggers list --json
    """
    app = state.app(db_url)
    rows = triggers_api.list_triggers(app.db, app.settings)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo("no row triggers: declare [triggers.<name>] in jobkit.toml and run `jobkit deploy`")
        return
    table = Table("name", "table", "events", "condition", "type", "state", "jobs (1h)")
    for r in rows:
        table.add_row(r.name, r.table, ", ".join(r.events), r.condition or "-", r.target, r.state, r.made)
    console().print(table)
