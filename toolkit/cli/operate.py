"""`jobkit jobs retry|cancel|delete`: the operator API (toolkit/ops/operate.py) from the command
line, by ids or by filter, batched and audited exactly as the dashboard's actions are."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.progress import Progress

from ..exceptions import InvalidState, NotFound
from ..ops import operate
from ..ops.selection import JobFilter, parse_ids
from .common import State, console, db_url_option

F = TypeVar("F", bound=Callable[..., Any])
_DOING = {"retry": "retrying", "cancel": "cancelled", "delete": "deleted"}
_PAST = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}
_OPTIONS = (
    click.argument("job_ids", nargs=-1, metavar="[JOB_ID]..."),
    click.option("--type", "job_type", help="Every job of this type."),
    click.option("--status", help="Every job in this status."),
    click.option("--key", help="Every job with this concurrency key."),
    click.option("--payload", help='Every job whose payload contains this JSON object, e.g. {"user": 42}.'),
    click.option("--since", help="Created at or after this time (ISO 8601, UTC unless it names an offset)."),
    click.option("--until", help="Created before this time."),
    click.option("--all", "everything", is_flag=True, help="Every job (no filter): must be said."),
    click.option("--batch", type=click.IntRange(1, 10_000), default=operate.BATCH, show_default=True,
                 help="Jobs per transaction."),
    click.option("--as", "actor", metavar="NAME", help="Who acts, for the audit log (default: OS user)."),
    click.option("--yes", is_flag=True, help="Do not ask for confirmation."),
    db_url_option,
)


def selection_options(func: F) -> F:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def act(state: State, verb: str, values: dict[str, Any]) -> None:
    """Build the operation from the command's options, confirm it, run it, print the result."""
    op = _operation(verb, values)
    app = state.app(values["db_url"])
    schema = app.settings.schema
    actor = cli_actor(values["actor"])
    with app.db.session() as s:
        matched = operate.count(s, schema, op)
        sample = operate.sample(s, schema, op) if not values["yes"] else []
    if op.ids is None and matched == 0:
        click.echo(f"nothing to {verb}: no job matches in a state {verb} applies to")
        return
    if not values["yes"] and (op.ids is None or verb == "delete"):
        _show(sample, matched)
        click.confirm(f"{verb} {matched} job(s) ({op.describe()})?", abort=True)
    with app.db.session() as s:
        audit_id = operate.start(s, schema, op, actor, matched)
    err = console(err=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(_DOING[verb], total=matched)
        result = operate.run(app.db, schema, audit_id, op, batch=values["batch"], matched=matched,
                             progress=lambda r: bar.update(task, completed=r.done + r.skipped_total))
    report(result, op)


def report(result: operate.Result, op: operate.Operation) -> None:
    """Print what was done; fail (exit 1) when something was left alone or the action stopped."""
    if op.ids is not None and len(op.ids) == 1 and result.skipped_ids:
        _single(op.verb, op.ids[0], result.skipped_ids[op.ids[0]])
    click.echo(f"{_DOING[result.verb]} {result.done} job(s)")
    for job_id, why in result.skipped_ids.items():
        click.echo(f"not {_PAST[result.verb]}: {job_id}: {why}", err=True)
    if result.skipped_total:
        click.echo(f"skipped {result.skipped_total}: " + ", ".join(
            f"{n} {why}" for why, n in sorted(result.skipped.items())), err=True)
    if result.error is not None:
        done = f"{result.done} job(s) {_PAST[result.verb]}"
        raise InvalidState(f"stopped after {result.batches} batch(es), {done}: {result.error}",
                           hint=f"the audit log's action {result.audit_id} records how far it got; "
                                "run the same command again for the rest")
    if result.skipped_total:
        raise InvalidState(f"{result.skipped_total} job(s) could not be {_PAST[result.verb]} (listed above)",
                           hint="see `jobkit jobs show ID`; an idempotency key held by a newer job: "
                                "cancel or purge the old one")


def cli_actor(given: str | None) -> str:
    """Who acts from the CLI: --as, else the OS user, marked as the CLI's ('alice@cli')."""
    name = (given or "").strip() or _os_user()
    return f"{name}@cli"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        return f"uid {os.getuid()}"


def _operation(verb: str, values: dict[str, Any]) -> operate.Operation:
    flt = JobFilter.parse({name: values.get(name) for name in ("type", "status", "key", "payload",
                                                               "since", "until")}
                          | {"type": values.get("job_type")})
    ids = tuple(parse_ids(list(values["job_ids"]))) if values["job_ids"] else None
    return operate.Operation(verb, ids, flt, everything=values["everything"])


def _show(sample: list[dict[str, Any]], matched: int) -> None:
    """The first jobs the action takes, as the dashboard's confirmation page lists them."""
    if not sample:
        return
    click.echo(f"the first {len(sample)} of {matched}:" if matched > len(sample) else "the jobs:")
    for row in sample:
        error = f"  {row['error']}" if row.get("error") else ""
        click.echo(f"  {row['id']}  {row['type']}  {row['status']}{error}")


def _single(verb: str, job_id: Any, why: str) -> None:
    if why == operate.NOT_FOUND:
        raise NotFound(f"no job {job_id}", hint="see `jobkit jobs list`")
    joint = " " if why.startswith("is ") else ": "
    raise InvalidState(f"job {job_id}{joint}{why}", hint="see `jobkit jobs show ID`")
