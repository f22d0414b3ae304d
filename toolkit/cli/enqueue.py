"""`jobkit enqueue` and `jobkit ratelimit`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..app import database
from ..durations import format_duration, parse_duration
from ..enqueue import enqueue as enqueue_job
from ..exceptions import ConfigError
from ..ops import ratelimits
from .common import State, db_url_option, pass_state


@click.command()
@click.argument("job_type", metavar="TYPE")
@click.option("--payload", default="{}", show_default=True, help="JSON, or @file.json.")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option("--delay", help="Run after this long, e.g. 30s or 5m.")
@click.option("--key", "idempotency_key", help="Idempotency key: an unfinished job with it is reused.")
@click.option("--max-attempts", type=click.IntRange(1, 1000), help="Default: the type's setting.")
@db_url_option
@pass_state
def enqueue(state: State, job_type: str, payload: str, priority: int, delay: str | None,
            idempotency_key: str | None, max_attempts: int | None, db_url: str | None) -> None:
    """Enqueue one job and print its id.

    \b
    Examples:
      jobkit enqueue send_email --payload '{"to": "a@example.com"}' --key welcome-42
      jobkit enqueue report --payload @report.json --delay 10m
    """
    data = _payload(payload)
    wait = parse_duration(delay, what="--delay") if delay else None
    settings = state.settings(db_url)
    job_id = enqueue_job(database(settings), job_type, data, priority=priority, delay=wait,
                         max_attempts=max_attempts, idempotency_key=idempotency_key,
                         schema=settings.schema)
    click.echo(str(job_id))


def _payload(text: str) -> object:
    source = "--payload"
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}", hint="check the path after @") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source} is not valid JSON: {exc}",
                          hint="quote it for the shell: --payload '{\"to\": \"a@example.com\"}'") from None


@click.group()
def ratelimit() -> None:
    """Rate limits shared by every worker (token buckets in the database).

    \b
    Example:
      jobkit ratelimit set mailgun --rate 60/min --burst 10
    """


@ratelimit.command("set")
@click.argument("key")
@click.option("--rate", "rate_text", required=True, help="e.g. 60/min, 10/s, 1000/h.")
@click.option("--burst", type=int, default=1, show_default=True, help="Tokens available at once.")
@db_url_option
@pass_state
def set_(state: State, key: str, rate_text: str, burst: int, db_url: str | None) -> None:
    """Create or change a rate limit; name it in a handler (rate_limit="KEY") or jobkit.toml.

    \b
    Example:
      jobkit ratelimit set mailgun --rate 60/min --burst 10
    """
    settings = state.settings(db_url)
    limit = ratelimits.set_limit(database(settings), settings, key, rate_text, burst)
    click.echo(f"{limit.key}: {limit.per_minute:g}/min, burst {limit.burst}")


@ratelimit.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@db_url_option
@pass_state
def list_(state: State, as_json: bool, db_url: str | None) -> None:
    """List rate limits and their current tokens.

    \b
    Example:
      jobkit ratelimit list --json
    """
    settings = state.settings(db_url)
    limits = ratelimits.list_limits(database(settings), settings)
    if as_json:
        click.echo(json.dumps([{"key": x.key, "per_second": x.rate, "burst": x.burst,
                                "tokens": round(x.tokens, 3)} for x in limits], indent=2))
        return
    for x in limits:
        every = format_duration(parse_duration(f"{1 / x.rate:.3f}s"))
        click.echo(f"{x.key}: {x.per_minute:g}/min (one token every {every}), burst {x.burst}")


@ratelimit.command()
@click.argument("key")
@db_url_option
@pass_state
def remove(state: State, key: str, db_url: str | None) -> None:
    """Remove a rate limit (its types then run unlimited).

    \b
    Example:
      jobkit ratelimit remove mailgun
    """
    settings = state.settings(db_url)
    ratelimits.remove_limit(database(settings), settings, key)
    click.echo(f"removed {key}")
