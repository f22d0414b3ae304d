"""`jobkit schedule`: jobkit's pg_cron jobs (never the user's other cron jobs)."""

from __future__ import annotations

import json

import click
from rich.table import Table

from ..cron import schedules as scheduling
from ..cron.spec import every as every_to_cron
from ..cron.spec import validate
from ..durations import format_time
from .common import State, console, db_url_option, pass_state, timestamp


@click.group()
def schedule() -> None:
    """Manage jobkit's pg_cron schedules.

    \b
    Example:
      jobkit schedule add wake-email --every 1m --type email
    """


@schedule.command()
@click.argument("name")
@click.option("--every", "every", help="30s (pg_cron >= 1.5), 5m, 1h, 1d ...")
@click.option("--cron", "cron_expr", help="A 5-field cron expression or 'N seconds'.")
@click.option("--type", "job_type", help="Wake the worker for this job type.")
@click.option("--sql", "sql", help="Run this SQL, e.g. a nightly enqueue.")
@db_url_option
@pass_state
def add(state: State, name: str, every: str | None, cron_expr: str | None, job_type: str | None,
        sql: str | None, db_url: str | None) -> None:
    """Add (or replace) a schedule.

    \b
    Examples:
      jobkit schedule add wake-email --every 1m --type email
      jobkit schedule add nightly --cron '0 3 * * *' --sql "select jobkit.enqueue('report', '{}')"
    """
    if (every is None) == (cron_expr is None):
        raise click.UsageError("give exactly one of --every or --cron")
    spec = every_to_cron(every) if every is not None else validate(cron_expr or "")
    app = state.app(db_url)
    want = scheduling.add(app.db, app.settings, name, spec, job_type=job_type, sql=sql)
    click.echo(f"scheduled {want.name} ({want.schedule}): {want.target}")


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def list_(state: State, as_json: bool, db_url: str | None) -> None:
    """List jobkit's schedules with their last run and next run.

    \b
    Example:
      jobkit schedule list --json
    """
    app = state.app(db_url)
    rows = scheduling.rows(app.db, app.settings)
    if as_json:
        click.echo(json.dumps([_row_dict(r) for r in rows], indent=2))
        return
    table = Table(title="jobkit schedules")
    for column in ("name", "schedule", "target", "active", "last run", "status", "next run"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.name, r.schedule, r.target, "yes" if r.active else "paused",
                      timestamp(r.last_start), r.last_status or "-", timestamp(r.next_run))
    console().print(table)


@schedule.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Also remove a built-in schedule (wake, sweep-*, prune*).")
@db_url_option
@pass_state
def remove(state: State, name: str, force: bool, db_url: str | None) -> None:
    """Remove a schedule. Built-in ones need --force (and come back with the next deploy).

    \b
    Example:
      jobkit schedule remove wake-email
    """
    app = state.app(db_url)
    warning = scheduling.remove(app.db, app.settings, name, force=force)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"removed {name}")


@schedule.command()
@click.argument("name")
@db_url_option
@pass_state
def pause(state: State, name: str, db_url: str | None) -> None:
    """Pause a schedule (deploy keeps it paused).

    \b
    Example:
      jobkit schedule pause prune
    """
    app = state.app(db_url)
    scheduling.set_active(app.db, app.settings, name, False)
    click.echo(f"paused {name}")


@schedule.command()
@click.argument("name")
@db_url_option
@pass_state
def resume(state: State, name: str, db_url: str | None) -> None:
    """Resume a paused schedule.

    \b
    Example:
      jobkit schedule resume prune
    """
    app = state.app(db_url)
    scheduling.set_active(app.db, app.settings, name, True)
    click.echo(f"resumed {name}")


def _row_dict(row: scheduling.ScheduleRow) -> dict[str, object]:
    return {
        "name": row.name, "schedule": row.schedule, "target": row.target, "active": row.active,
        "origin": row.origin, "last_run": format_time(row.last_start) if row.last_start else None,
        "last_status": row.last_status, "next_run": format_time(row.next_run) if row.next_run else None,
    }
