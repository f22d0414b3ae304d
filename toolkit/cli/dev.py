"""`jobkit dev`: the whole system live on the local database; `--demo` runs it bounded."""

from __future__ import annotations

import asyncio
import json

import click
from rich.live import Live
from rich.table import Table

from ..ops import dev as dev_api
from ..ops import status as status_api
from ..ops.demo import Outcome, run_demo
from ..worker.local import LocalWorker
from .common import State, console, pass_state
from .ops import render


@click.command()
@click.option("--demo", is_flag=True, help="Run the example jobs end to end, verify, exit.")
@click.option("--app", "app_spec", metavar="MODULE:REGISTRY",
              help="Your handlers (default: jobs:jobs when ./jobs.py exists, else the example).")
@pass_state
def dev(state: State, demo: bool, app_spec: str | None) -> None:
    """Start the local database, deploy, run a worker with your handlers and show a live status
    view; Ctrl-C stops everything. With --demo: enqueue the example jobs, watch them finish, exit.

    \b
    Examples:
      jobkit dev --demo
      jobkit dev --app app.jobs:jobs
    """
    env = dev_api.start(state.settings(), app_spec, click.echo)
    click.echo(f"database {env.db.display_url}: schema {env.settings.schema} at {env.head}")
    if demo:
        outcomes = asyncio.run(run_demo(env.db, env.settings, env.registry, click.echo))
        _show(outcomes)
        dev_api.verify(outcomes)
        click.echo(f"demo ok: {len(outcomes)} jobs reached their expected states")
        return
    try:
        asyncio.run(_live(env))
    except KeyboardInterrupt:
        pass
    finally:
        if env.stop():
            click.echo("stopped the local database")


async def _live(env: dev_api.DevEnv) -> None:
    async with LocalWorker(env.db, env.settings, env.registry, echo=click.echo) as worker:
        click.echo(f"worker up ({worker.transport}) for {', '.join(env.registry.types)}; Ctrl-C stops")
        with Live(console=console(), auto_refresh=False) as live:
            while True:
                st = await asyncio.to_thread(status_api.collect, env.db, env.settings)
                live.update(render(st), refresh=True)
                await asyncio.sleep(2)  # the refresh interval


def _show(outcomes: list[Outcome]) -> None:
    table = Table(title="demo jobs")
    for column in ("job", "tries", "status", "result / last error"):
        table.add_column(column)
    for o in outcomes:
        detail = json.dumps(o.job.result) if o.job.status == "completed" else (o.job.last_error or "")
        status = o.job.status.value if o.ok else f"{o.job.status.value} (expected {o.expect.value})"
        table.add_row(o.label, str(o.job.attempts), status, detail.strip().splitlines()[-1] if detail else "")
    console().print(table)


COMMANDS = (dev,)
