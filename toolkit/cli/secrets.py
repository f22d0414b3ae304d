"""`jobkit secrets`: the worker URL and the signing secret that wake() reads at run time."""

from __future__ import annotations

import sys

import click

from ..durations import parse_duration
from ..worker import secrets as secrets_api
from .common import State, db_url_option, pass_state


@click.group()
def secrets() -> None:
    """Store the worker endpoint's URL and signing secret (Vault when installed).

    \b
    Example:
      jobkit secrets set --url https://worker.example.com/run
    """


@secrets.command("set")
@click.option("--url", help="The worker's POST /run endpoint.")
@click.option("--rotate", is_flag=True,
              help="Generate a new secret (the previous one stays valid for --grace).")
@click.option("--secret-stdin", is_flag=True,
              help="Read the secret from standard input instead (it then travels as a statement parameter).")
@click.option("--grace", default="10m", show_default=True,
              help="How long a replaced secret is still accepted, so running workers see no failed wake-up.")
@db_url_option
@pass_state
def set_(state: State, url: str | None, rotate: bool, secret_stdin: bool, grace: str,
         db_url: str | None) -> None:
    """Store the worker URL; the database generates the signing secret when none is stored yet
    (or with --rotate). The secret is never printed: the worker reads it from the database.

    \b
    Examples:
      jobkit secrets set --url https://worker.example.com/run
      jobkit secrets set --rotate
      printf %s "$SECRET" | jobkit secrets set --secret-stdin
    """
    if secret_stdin and rotate:
        raise click.UsageError("--secret-stdin and --rotate exclude each other")
    secret = sys.stdin.read().strip() if secret_stdin else None
    app = state.app(db_url)
    info, generated = secrets_api.set_secrets(app.db, app.settings, url=url, secret=secret,
                                              rotate=rotate, grace=parse_duration(grace, what="--grace"))
    _print(info)
    if generated:
        click.echo("a new secret was generated in the database")


@secrets.command()
@db_url_option
@pass_state
def show(state: State, db_url: str | None) -> None:
    """Show the stored URL and the secret's fingerprint (never the secret).

    \b
    Example:
      jobkit secrets show
    """
    app = state.app(db_url)
    _print(secrets_api.show(app.db, app.settings))


def _print(info: secrets_api.SecretsInfo) -> None:
    click.echo(f"store:  {'Supabase Vault' if info.store == 'vault' else 'jobkit private table'}")
    click.echo(f"url:    {info.url or '(not set)'}")
    secret = f"{info.fingerprint} ({info.length} chars)" if info.fingerprint else "(not set)"
    click.echo(f"secret: {secret}" + ("; the previous one is still accepted" if info.previous_valid else ""))
