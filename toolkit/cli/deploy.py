"""`jobkit render` and `jobkit deploy`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import click

from ..durations import parse_duration
from ..exceptions import ConfigError
from ..schema.deploy import DeployOptions, DeployReport, deploy
from ..schema.render import render_script, write_units
from ..schema.supabase_cli import write_functions, write_migration, write_triggers, write_user_api
from ..schema.trigger_script import render_apply
from .common import State, db_url_option, pass_state


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one file per migration into DIR instead of printing the script.")
@click.option("--supabase", "supabase", is_flag=True,
              help="Write the pending migrations as a Supabase CLI migration file.")
@click.option("--supabase-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("supabase"), show_default=True, help="The Supabase CLI project folder.")
@pass_state
def render(state: State, out_dir: Path | None, supabase: bool, supabase_dir: Path) -> None:
    """Print the SQL jobkit installs (deterministic: same config, same bytes).

    \b
    Examples:
      jobkit render > jobkit.sql && psql "$DATABASE_URL" -f jobkit.sql
      jobkit render --supabase        # supabase/migrations/<UTC timestamp>_jobkit_0001.sql
      jobkit render --out build/sql   # build/sql/0001_baseline.sql, ...
    """
    settings = state.settings()
    if supabase:
        path = write_migration(settings, supabase_dir)
        click.echo(f"wrote {path}" if path else "no new jobkit migrations: nothing written")
        functions = write_functions(settings, supabase_dir)
        if functions:
            click.echo(f"wrote {functions}")
        triggers = write_triggers(settings, supabase_dir)
        if triggers:
            click.echo(f"wrote {triggers}")
        user_api = write_user_api(settings, supabase_dir)
        if user_api:
            click.echo(f"wrote {user_api}")
    elif out_dir:
        for target in write_units(settings, out_dir):
            click.echo(f"wrote {target}")
    else:
        row_triggers = render_apply(settings) if settings.triggers else ""
        click.echo(render_script(settings, row_triggers=row_triggers), nl=False)


@click.command("deploy")
@db_url_option
@click.option("--dry-run", is_flag=True, help="Print the SQL that would run; change nothing.")
@click.option("--check", is_flag=True,
              help="Exit 3 if the database is behind or drifted (the CI pull-request step).")
@click.option("--lock-wait", default="5m", show_default=True,
              help="How long to queue behind another deploy.")
@click.option("--lock-timeout", default="500ms", show_default=True,
              help="How long one statement may wait for a table lock (enqueues and claims queue behind it).")
@click.option("--lock-attempts", default=10, show_default=True, type=click.IntRange(1, 100),
              help="Tries of a migration whose lock wait ran out (rolled back each time, pauses doubling).")
@pass_state
def deploy_command(state: State, db_url: str | None, dry_run: bool, check: bool, lock_wait: str,
                   lock_timeout: str, lock_attempts: int) -> None:
    """Apply jobkit's pending migrations and sync job type settings.

    Each migration runs in its own transaction with its history row, under an advisory lock:
    concurrent deploys queue; a second run changes nothing.

    \b
    Examples:
      jobkit deploy --db-url "$SUPABASE_DB_URL"
      jobkit deploy --check       # exit 3 when behind: the CI step on pull requests
      jobkit deploy --dry-run
    """
    app = state.app(db_url, application_name="jobkit deploy", deployed=False)
    options = DeployOptions(dry_run=dry_run, check=check, lock_wait=parse_duration(lock_wait),
                            lock_timeout=_lock_timeout(lock_timeout), lock_attempts=lock_attempts)
    report = deploy(app.db, app.settings, options, echo=lambda m: click.echo(m, err=True))
    _print_report(report, app.settings.schema, dry_run=dry_run, check=check)


def _lock_timeout(text: str) -> timedelta:
    value = parse_duration(text, what="--lock-timeout")
    if value < timedelta(milliseconds=1):
        raise ConfigError(f"--lock-timeout: {text!r} would let a migration wait for its locks forever",
                          hint="give a positive duration such as 500ms or 2s")
    return value


def _print_report(report: DeployReport, schema: str, *, dry_run: bool, check: bool) -> None:
    for notice in dict.fromkeys(report.notices):
        click.echo(f"note: {notice.removeprefix('jobkit: ')}", err=True)
    if check:
        click.echo(f"up to date: schema {schema} at {report.head}")
    elif dry_run:
        if report.sql:
            click.echo(report.sql, nl=False)
        click.echo(_dry_summary(report), err=True)
    elif report.changed:
        for label in report.applied:
            click.echo(f"applied {label}")
        if report.functions_changed:
            click.echo(f"applied sql/functions/: {', '.join(report.functions_changed)}")
        if report.types_changed:
            click.echo(f"synced job type settings: {', '.join(report.types_changed)}")
        if report.settings_changed:
            click.echo(f"synced runtime settings: {', '.join(report.settings_changed)}")
        for line in report.schedules_changed:
            click.echo(line)
        for line in report.triggers_changed:
            click.echo(line)
        click.echo(f"schema {schema} is at {report.head}")
    else:
        click.echo(f"already up to date: schema {schema} at {report.head}; nothing changed")


def _dry_summary(report: DeployReport) -> str:
    parts = [f"would apply {', '.join(report.pending)}"] if report.pending else []
    if report.functions_changed:
        parts.append(f"would apply sql/functions/: {', '.join(report.functions_changed)}")
    if report.unfinished:
        parts.append(f"would finish what an interrupted deploy left: {', '.join(report.unfinished)}")
    if report.types_changed:
        parts.append(f"would sync job type settings: {', '.join(report.types_changed)}")
    if report.settings_changed:
        parts.append(f"would sync runtime settings: {', '.join(report.settings_changed)}")
    parts += [f"would {line}" for line in report.schedules_changed]
    parts += [f"row {line}" for line in report.triggers_changed]
    return "; ".join(parts) if parts else "nothing to do: the database is up to date"


COMMANDS = (render, deploy_command)
