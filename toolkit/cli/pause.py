"""`jobkit pause` and `jobkit resume`: a job type, or one concurrency key of it."""

from __future__ import annotations

import json
import re

import click

from ..ops import operate, types
from .common import State, db_url_option, pass_state
from .operate import cli_actor

key_option = click.option("--key", default=None, help="Only this concurrency key of the type.")
as_option = click.option("--as", "actor", metavar="NAME",
                         help="Who acts, for the audit log (default: your OS user).")


@click.command()
@click.argument("job_type", metavar="TYPE")
@key_option
@as_option
@db_url_option
@pass_state
def pause(state: State, job_type: str, key: str | None, actor: str | None, db_url: str | None) -> None:
    """Stop claiming a job type (or one of its keys) in every worker; running jobs finish. Audited.

    \b
    Examples:
      jobkit pause send_email
      jobkit pause report --key tenant:42
    """
    app = state.app(db_url)
    target = job_type if key is None else f"{job_type} key {key!r}"
    types.require_known(app.db, app.settings, job_type,
                        new_type_hint="to pause a type no worker has served yet, declare it in jobkit.toml "
                        f"([types.{_toml_key(job_type)}])")
    changed = operate.set_paused(app.db, app.settings.schema, job_type, key, paused=True,
                                 actor=cli_actor(actor))
    click.echo(f"paused {target}" if changed else f"{target} was paused already")


@click.command()
@click.argument("job_type", metavar="TYPE")
@key_option
@as_option
@db_url_option
@pass_state
def resume(state: State, job_type: str, key: str | None, actor: str | None, db_url: str | None) -> None:
    """Claim a paused job type (or key) again, and wake the workers for its due jobs. Audited.

    \b
    Examples:
      jobkit resume send_email
      jobkit resume report --key tenant:42
    """
    app = state.app(db_url)
    target = job_type if key is None else f"{job_type} key {key!r}"
    changed = operate.set_paused(app.db, app.settings.schema, job_type, key, paused=False,
                                 actor=cli_actor(actor))
    click.echo(f"resumed {target}" if changed else f"{target} was not paused")


def _toml_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


COMMANDS = (pause, resume)
