"""`jobkit enqueue`: one job from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..durations import parse_duration
from ..enqueue import enqueue as enqueue_job
from ..enqueue import new_job
from ..exceptions import ConfigError
from ..ops import types
from .common import State, db_url_option, pass_state


@click.command()
@click.argument("job_type", metavar="TYPE")
@click.option("--payload", default="{}", show_default=True, help="JSON, or @file.json.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--delay", help="Run after this long, e.g. 30s or 5m.")
@click.option("--key", "idempotency_key", help="Idempotency key: an unfinished job with it is reused.")
@click.option("--max-attempts", type=click.IntRange(1, 1000), help="Default: the type's setting.")
@click.option("--concurrency-key", help="Its concurrency key (default: the type's concurrency_key template).")
@click.option("--debounce", help="e.g. 30s: replace the key's pending job, run this long after the last one.")
@click.option("--throttle", help="e.g. 1m: one job per key in this window; later ones print its id.")
@click.option("--new-type", is_flag=True,
              help="TYPE is new on purpose: enqueue it although no worker, jobkit.toml or job knows it yet.")
@db_url_option
@pass_state
def enqueue(state: State, job_type: str, payload: str, priority: int, delay: str | None,
            idempotency_key: str | None, max_attempts: int | None, concurrency_key: str | None,
            debounce: str | None, throttle: str | None, new_type: bool, db_url: str | None) -> None:
    """Enqueue one job and print its id (TYPE must be known; --new-type introduces a new one).

    A type is known when jobkit.toml declares it, a worker has served it, or jobs of it exist.

    \b
    Examples:
      jobkit enqueue send_email --payload '{"to": "a@example.com"}' --key welcome-42
      jobkit enqueue report --payload @report.json --delay 10m
      jobkit enqueue reindex --payload '{"tenant": 42}' --concurrency-key tenant:42 --debounce 30s
      jobkit enqueue resize_image --new-type --payload '{"id": 7}'
    """
    data = _payload(payload)
    wait = parse_duration(delay, what="--delay") if delay else None
    options: dict[str, Any] = {
        "priority": priority, "delay": wait, "max_attempts": max_attempts, "idempotency_key": idempotency_key,
        "concurrency_key": concurrency_key, "debounce": debounce, "throttle": throttle}
    new_job(job_type, data, **options)  # every value checked before the database is asked
    app = state.app(db_url)
    if not new_type:
        types.require_known(app.db, app.settings, job_type,
                            new_type_hint="to enqueue a new type on purpose, add --new-type")
    job_id = enqueue_job(app.db, job_type, data, schema=app.settings.schema, **options)
    if new_type:
        types.introduce(app.db, app.settings, job_type)
    click.echo(str(job_id))


def _payload(text: str) -> object:
    source = "--payload"
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}", hint="check the path after @") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path} is not UTF-8 (byte {exc.start})",
                              hint="payload files are UTF-8 JSON") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"{source} is nested too deeply",
                          hint="flatten the JSON (a few hundred levels at most)") from None
    except ValueError as exc:
        raise ConfigError(f"{source} is not valid JSON: {exc}",
                          hint="quote it for the shell: --payload '{\"to\": \"a@example.com\"}'") from None
