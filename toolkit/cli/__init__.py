"""The `jobkit` command: a thin click shell over the Python API.

Exit codes: 0 ok, 1 error, 2 usage error, 3 check failed or drift.
"""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from ..exceptions import JobkitError
from . import db as db_cmd
from . import deploy as deploy_cmd
from . import dev as dev_cmd
from . import ops as ops_cmd
from . import pause as pause_cmd
from .common import pass_state
from .dashboard import dashboard
from .enqueue import enqueue
from .flows import flows
from .init import init
from .jobs import jobs
from .ratelimit import ratelimit
from .schedule import schedule
from .secrets import secrets
from .triggers import triggers
from .worker import worker


class JobkitGroup(click.Group):
    """Turns every JobkitError into ``error: ...`` / ``hint: ...`` and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except JobkitError as exc:
            verbose = bool(ctx.obj and getattr(ctx.obj, "verbose", False))
            if verbose:
                import traceback

                traceback.print_exc()
            click.echo(f"error: {exc.message}", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=JobkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="jobkit")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="Path to jobkit.toml (default: $JOBKIT_CONFIG or ./jobkit.toml).")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks on errors.")
@pass_state
def cli(state: Any, config_path: str | None, verbose: bool) -> None:
    """jobkit: Postgres-native background jobs for Supabase.

    \b
    Example:
      jobkit db start && jobkit deploy && jobkit dev --demo
    """
    state.config_path = config_path
    state.verbose = verbose


for command in (*deploy_cmd.COMMANDS, *dev_cmd.COMMANDS, db_cmd.db, schedule, secrets,
                enqueue, ratelimit, *pause_cmd.COMMANDS, worker, *ops_cmd.COMMANDS, jobs, init, dashboard,
                triggers, flows):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="jobkit")


if __name__ == "__main__":  # pragma: no cover
    main()
