"""`jobkit secrets`: the worker URL and token that wake() reads at run time."""

from __future__ import annotations

import sys

import click

from .. import secrets as secrets_api
from ..target import database
from .common import State, db_url_option, pass_state


@click.group()
def secrets() -> None:
    """Store the worker endpoint's URL and token (Vault when installed).

    \b
    Example:
      jobkit secrets set --url https://worker.example.com/run
    """


@secrets.command("set")
@click.option("--url", help="The worker's POST /run endpoint.")
@click.option("--token-stdin", is_flag=True, help="Read the bearer token from standard input.")
@click.option("--rotate", is_flag=True, help="Generate a new token (schedules need no change).")
@db_url_option
@pass_state
def set_(state: State, url: str | None, token_stdin: bool, rotate: bool, db_url: str | None) -> None:
    """Store the URL and token; a token is generated when none is stored yet. The token is never
    printed: the worker reads it from the database.

    \b
    Examples:
      jobkit secrets set --url https://worker.example.com/run
      printf %s "$TOKEN" | jobkit secrets set --token-stdin
      jobkit secrets set --rotate
    """
    if token_stdin and rotate:
        raise click.UsageError("--token-stdin and --rotate exclude each other")
    token = sys.stdin.read().strip() if token_stdin else None
    settings = state.settings(db_url)
    info, generated = secrets_api.set_secrets(database(settings), settings, url=url, token=token,
                                              rotate=rotate)
    _print(info)
    if generated:
        click.echo("a new token was generated")


@secrets.command()
@db_url_option
@pass_state
def show(state: State, db_url: str | None) -> None:
    """Show the stored URL and the token's fingerprint (never the token).

    \b
    Example:
      jobkit secrets show
    """
    settings = state.settings(db_url)
    _print(secrets_api.show(database(settings), settings))


def _print(info: secrets_api.SecretsInfo) -> None:
    click.echo(f"store: {'Supabase Vault' if info.store == 'vault' else 'jobkit private table'}")
    click.echo(f"url:   {info.url or '(not set)'}")
    token = f"{info.token_fingerprint} ({info.token_length} chars)" if info.token_fingerprint else "(not set)"
    click.echo(f"token: {token}")
