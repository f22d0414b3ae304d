"""`jobkit jobs`: list, show, retry, cancel, delete, purge."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.progress import Progress
from rich.table import Table

from ..durations import format_duration, parse_duration
from ..ops import admin as jobsadmin
from .common import State, console, db_url_option, pass_state, timestamp, to_json
from .operate import act, selection_options


@click.group()
def jobs() -> None:
    """Look at and act on individual jobs.

    \b
    Example:
      jobkit jobs list --status dead --type send_email
    """


@jobs.command("list")
@click.option("--type", "job_type", help="Only this job type.")
@click.option("--status", help="pending, processing, completed, failed, dead or cancelled.")
@click.option("--key", help="Only jobs with this concurrency key.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def list_(
    state: State, job_type: str | None, status: str | None, key: str | None, limit: int, as_json: bool,
    db_url: str | None,
) -> None:
    """The newest jobs first.

    \b
    Examples:
      jobkit jobs list --status failed --limit 20
      jobkit jobs list --type report --key tenant:42 --status processing
    """
    app = state.app(db_url)
    rows = jobsadmin.list_jobs(app.db, app.settings, job_type=job_type, status=status, limit=limit, key=key)
    if as_json:
        click.echo(to_json(rows))
        return
    table = Table()
    for column in ("id", "type", "key", "status", "tries", "prio", "scheduled for", "last error"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["id"]),
            r["type"],
            "-" if r["key"] is None else r["key"],
            r["status"],
            jobsadmin.tries(r["attempts"], r["round_start"], r["attempt_limit"]),
            str(r["priority"]),
            timestamp(r["scheduled_for"]),
            r["error"],
        )
    console().print(table)


@jobs.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def show(state: State, job_id: str, as_json: bool, db_url: str | None) -> None:
    """A job's payload, result and every attempt with its error.

    \b
    Example:
      jobkit jobs show 3f0c5b0e-...
    """
    app = state.app(db_url)
    job, attempts = jobsadmin.show(app.db, app.settings, jobsadmin.parse_id(job_id))
    limit = jobsadmin.attempt_limit(app.db, app.settings, job.id)
    if as_json:
        click.echo(to_json({"job": job.__dict__, "attempt_limit": limit,
                            "attempts": [a.__dict__ for a in attempts]}))
        return
    out = console()
    out.print(f"{job.id}  {job.type}  {job.status.value}  "
              f"attempt {jobsadmin.tries(job.attempts, job.round_start, limit)}", markup=False)
    out.print(f"payload: {json.dumps(job.payload)}", markup=False)
    out.print(f"result:  {json.dumps(job.result)}", markup=False)
    if job.progress:
        out.print(f"progress: {progress_line(job.progress)}", markup=False)
    for a in attempts:
        out.print(
            f"- attempt {a.attempt} on {a.worker_id}: {a.outcome} at {timestamp(a.finished_at)} "
            f"({format_duration(a.duration) if a.duration is not None else '-'})",
            markup=False,
        )
        if a.error:
            out.print("    " + a.error.rstrip().replace("\n", "\n    "), markup=False)


@jobs.command()
@selection_options
@click.option("--dead", is_flag=True, help="Every dead job (the same as --status dead).")
@pass_state
def retry(state: State, /, dead: bool, **values: Any) -> None:
    """Run failed, dead or cancelled jobs again now (fresh attempts): by id or filter, audited.

    Batches of --batch jobs, one transaction each, recorded in the audit log as the dashboard's
    actions are; an empty filter needs --all.

    \b
    Examples:
      jobkit jobs retry 3f0c5b0e-...
      jobkit jobs retry --dead --type send_email
      jobkit jobs retry --status failed --payload '{"tenant": 42}' --as alice
    """
    if dead:
        if values["status"] not in (None, "dead"):
            raise click.UsageError("--dead is --status dead: give one of them")
        values["status"] = "dead"
    act(state, "retry", values)


@jobs.command()
@selection_options
@pass_state
def cancel(state: State, /, **values: Any) -> None:
    """Cancel pending or processing jobs: by id or filter, audited.

    \b
    Examples:
      jobkit jobs cancel 3f0c5b0e-...
      jobkit jobs cancel --type report --key tenant:42 --status pending
    """
    act(state, "cancel", values)


@jobs.command()
@selection_options
@pass_state
def delete(state: State, /, **values: Any) -> None:
    """Delete jobs (not processing ones) with their history: by id or filter, audited.

    To delete old finished jobs routinely, see `jobkit jobs purge`.

    \b
    Examples:
      jobkit jobs delete 3f0c5b0e-... --yes
      jobkit jobs delete --type typo_type --status pending
    """
    act(state, "delete", values)


@jobs.command()
@click.option("--status", required=True, help="completed, dead, cancelled or failed.")
@click.option("--older-than", required=True, help="e.g. 7d.")
@click.option("--type", "job_type", help="Only this type.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@db_url_option
@pass_state
def purge(
    state: State, status: str, older_than: str, job_type: str | None, yes: bool, db_url: str | None
) -> None:
    """Delete finished jobs and their history, in short batches.

    \b
    Example:
      jobkit jobs purge --status completed --older-than 7d --yes
    """
    age = parse_duration(older_than, what="--older-than")
    app = state.app(db_url)
    count = jobsadmin.purge_count(app.db, app.settings, status, age, job_type)
    if count and not yes:
        click.confirm(f"delete {count} {status} job(s) older than {older_than}?", abort=True)
    with Progress(console=console(err=True), transient=True) as bar:
        task = bar.add_task("purging", total=count)
        deleted = jobsadmin.purge(app.db, app.settings, status, age, job_type, lambda n: bar.advance(task, n))
    click.echo(f"deleted {deleted} job(s)")


@jobs.command()
@click.argument("job_id")
@click.option("--from-step", "step", required=True, metavar="NAME",
              help="The step to run again: the stored steps before it are copied, it and the rest run anew.")
@click.option("--as", "actor", metavar="NAME", help="Who acts, for the audit log (default: your OS user).")
@db_url_option
@pass_state
def replay(state: State, job_id: str, step: str, actor: str | None, db_url: str | None) -> None:
    """Run a durable job again from one of its steps, as a new job. Audited.

    \b
    Example:
      jobkit jobs replay 3f0c5b0e-... --from-step email
    """
    from ..ops import flows as flowops
    from .operate import cli_actor

    app = state.app(db_url)
    new_id = flowops.replay(app.db, app.settings.schema, jobsadmin.parse_id(job_id), step, cli_actor(actor))
    click.echo(f"replaying {job_id} from step {step!r} as job {new_id}")


def progress_line(value: dict[str, Any]) -> str:
    """ctx.progress's report in one line: 40% (4/10) message {data}."""
    parts = []
    if value.get("fraction") is not None:
        parts.append(f"{float(value['fraction']):.0%}")
    if value.get("total") is not None:
        parts.append(f"({value.get('done')}/{value['total']})")
    if value.get("message"):
        parts.append(str(value["message"]))
    if value.get("data") is not None:
        parts.append(json.dumps(value["data"]))
    return " ".join(parts)
