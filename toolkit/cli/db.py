"""`jobkit db`: the embedded local PostgreSQL (development, tests, the demo)."""

from __future__ import annotations

import click

from ..ops.localdb import LocalCluster
from .common import State, pass_state


@click.group()
def db() -> None:
    """Run a local PostgreSQL 15 with pg_cron under ./.jobkit (127.0.0.1 only).

    \b
    Example:
      jobkit db start && export JOBKIT_DB_URL=$(jobkit db url)
    """


@db.command()
@pass_state
def start(state: State) -> None:
    """Start the local cluster (created on first use); prints its URL.

    \b
    Example:
      jobkit db start
    """
    click.echo(_cluster(state).start())


@db.command()
@pass_state
def stop(state: State) -> None:
    """Stop the local cluster (its data stays under .jobkit/).

    \b
    Example:
      jobkit db stop
    """
    _cluster(state).stop()
    click.echo("stopped")


@db.command()
@pass_state
def status(state: State) -> None:
    """Show whether the local cluster runs, its port and data directory.

    \b
    Example:
      jobkit db status
    """
    st = _cluster(state).status()
    click.echo(f"running: {'yes' if st.running else 'no'}")
    click.echo(f"data:    {st.data_dir}")
    if st.running:
        click.echo(f"url:     {st.url}")
        click.echo(f"version: {st.version}")


@db.command()
@click.option("--dbname", default="postgres", show_default=True, help="Database name in the URL.")
@pass_state
def url(state: State, dbname: str) -> None:
    """Print the local cluster's URL (exit 1 when it is not running).

    \b
    Example:
      export JOBKIT_DB_URL=$(jobkit db url)
    """
    click.echo(_cluster(state).url(dbname))


def _cluster(state: State) -> LocalCluster:
    return LocalCluster(state.settings().home)
