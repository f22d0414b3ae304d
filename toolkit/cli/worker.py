"""`jobkit worker serve`: the endpoint pg_net calls (or a NOTIFY listener)."""

from __future__ import annotations

import logging

import click

from ..durations import parse_duration
from ..names import wake_channel
from ..worker.endpoint import EndpointOptions
from ..worker.presence import parse_heartbeat
from ..worker.serve import (
    WorkerOptions,
    check_database,
    check_port,
    choose_backend,
    load_registry,
    serve,
    transport_warning,
    user_step_types,
)
from .common import State, db_url_option, pass_state


@click.group()
def worker() -> None:
    """Run the worker endpoint.

    \b
    Example:
      jobkit worker serve app.jobs:jobs --port 8000
    """


@worker.command("serve")
@click.argument("registry_spec", metavar="MODULE:REGISTRY")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Jobs run at once by this process.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=None,
              help="Most jobs claimed per statement (default: adapts, up to 100).")
@click.option("--prefetch", type=click.IntRange(1, 100), default=None,
              help="Hold up to concurrency x prefetch claimed jobs (default: adapts to handler times).")
@click.option("--mode", type=click.Choice(["background", "sync"]), default="background",
              show_default=True, help="background: answer 202 at once; sync: drain, then answer.")
@click.option("--grace", default="30s", show_default=True, help="On SIGTERM, how long running jobs get.")
@click.option("--linger", default=None,
              help="How long an emptied drain re-checks for new jobs "
              "(default: 2s over HTTP, 0s with --listen).")
@click.option("--give-up", default="5m", show_default=True,
              help="Exit non-zero when the database (or LISTEN) stays unreachable this long.")
@click.option("--listen", "listen_mode", is_flag=True,
              help="Also LISTEN for NOTIFY wake-ups (the transport without pg_net).")
@click.option("--heartbeat", default="5s", show_default=True,
              help="How often this worker writes its row of the workers table (1s to 1m; off: never).")
@click.option("--no-prepare", is_flag=True, help="No prepared statements (Supavisor transaction mode).")
@click.option("--data-api", is_flag=True,
              help="Call jobkit through Supabase's Data API ([api] schema, $SUPABASE_URL, "
              "$SUPABASE_SERVICE_ROLE_KEY) instead of connecting to the database.")
@db_url_option
@pass_state
def serve_command(state: State, registry_spec: str, host: str, port: int, concurrency: int,
                  batch_size: int | None, prefetch: int | None, mode: str, grace: str, linger: str | None,
                  give_up: str, listen_mode: bool, heartbeat: str, no_prepare: bool, data_api: bool,
                  db_url: str | None) -> None:
    """Serve POST /run, GET /healthz and GET /metrics for the handlers in MODULE:REGISTRY.

    Wake-ups are signed by the database with the secret `jobkit secrets set` stored (the worker
    reads it, and follows its rotations); $JOBKIT_WORKER_SECRET fixes it instead. /metrics
    (Prometheus) needs Authorization: Bearer $JOBKIT_METRICS_TOKEN, or without it a loopback client.

    \b
    Examples:
      jobkit worker serve app.jobs:jobs --host 0.0.0.0 --port 8000 --concurrency 32
      jobkit worker serve app.jobs:jobs --listen
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S%z")  # ISO 8601, like every command's output
    beat = parse_heartbeat(heartbeat)
    settings = state.settings(db_url)
    registry = load_registry(registry_spec)
    default_linger = 0.0 if listen_mode else 2.0
    lingering = parse_duration(linger, what="--linger").total_seconds() if linger else default_linger
    endpoint = EndpointOptions(
        concurrency=concurrency, batch_size=batch_size, prefetch=prefetch, mode=mode,
        grace=parse_duration(grace, what="--grace"), linger=lingering,
        give_up=parse_duration(give_up, what="--give-up"),
        listen=wake_channel(settings.schema) if listen_mode else None, secret=state.worker_secret(),
        metrics_token=state.metrics_token(),
        heartbeat=beat, step_types=user_step_types(settings))
    options = WorkerOptions(host=host, port=port, prepare=not no_prepare, endpoint=endpoint)
    backend = choose_backend(settings, options, data_api=data_api)
    check_port(host, port)  # a busy port: one line, exit 1
    if not data_api:
        check_database(settings)  # a bad URL or an unreachable database: one line, exit 1
    warning = None if data_api else transport_warning(settings, options)
    if warning:
        logging.getLogger("jobkit.worker").warning(warning)
    serve(registry, backend, options)
