"""`jobkit dev`: the whole system live on the local database; `--demo` runs it bounded."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import click
from rich.live import Live
from rich.table import Table

from ..config import RateLimitConfig, Settings
from ..connector import Database
from ..exceptions import JobkitError
from ..handlers import Registry
from ..ops import status as status_api
from ..ops.demo import Outcome, run_demo
from ..ops.example import example_registry
from ..ops.localdb import LocalCluster
from ..schema.deploy import deploy
from ..worker.local import LocalWorker
from ..worker.serve import load_registry
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
    settings = state.settings()
    cluster = None if settings.db_url else LocalCluster(settings.home)
    url = settings.db_url or cluster.start()  # type: ignore[union-attr]
    settings = _with_demo_limit(replace(settings, db_url=url))
    db = Database(url, application_name="jobkit dev")
    report = deploy(db, settings, echo=click.echo)
    click.echo(f"database {db.display_url}: schema {settings.schema} at {report.head}")
    registry = _registry(app_spec)
    if demo:
        _demo(db, settings, registry)
        return
    try:
        asyncio.run(_live(db, settings, registry))
    except KeyboardInterrupt:
        pass
    finally:
        if cluster is not None:
            cluster.stop()
            click.echo("stopped the local database")


def _registry(app_spec: str | None) -> Registry:
    if app_spec:
        return load_registry(app_spec)
    if Path("jobs.py").is_file():
        return load_registry("jobs:jobs")
    return example_registry()


def _with_demo_limit(settings: Settings) -> Settings:
    if "demo-api" in settings.ratelimits:
        return settings
    return replace(settings, ratelimits={**settings.ratelimits, "demo-api": RateLimitConfig(2.0, 1)})


def _demo(db: Database, settings: Settings, registry: Registry) -> None:
    outcomes = asyncio.run(run_demo(db, settings, registry, click.echo))
    _show(outcomes)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        raise JobkitError(f"{len(bad)} demo job(s) ended in an unexpected state: {bad[0].label}")
    click.echo(f"demo ok: {len(outcomes)} jobs reached their expected states")


async def _live(db: Database, settings: Settings, registry: Registry) -> None:
    async with LocalWorker(db, settings, registry, echo=click.echo) as worker:
        click.echo(f"worker up ({worker.transport}) for {', '.join(registry.types)}; Ctrl-C stops")
        with Live(console=console(), auto_refresh=False) as live:
            while True:
                st = await asyncio.to_thread(status_api.collect, db, settings)
                live.update(render(st), refresh=True)
                await asyncio.sleep(2)


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
