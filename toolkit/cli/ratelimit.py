"""`jobkit ratelimit`: the token buckets every worker shares."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from ..durations import format_duration
from ..ops import ratelimits
from .common import State, db_url_option, pass_state


@click.group()
def ratelimit() -> None:
    """Rate limits shared by every worker (token buckets in the database).

    \b
    Example:
      jobkit ratelimit set mailgun --rate 60/min --burst 10
    """


@ratelimit.command("set")
@click.argument("key")
@click.option("--rate", "rate_text", help="e.g. 60/min, 10/s, 1000/h (required for a new limit).")
@click.option("--burst", type=int, default=None,
              help="Tokens available at once (a new limit: 1; a changed one keeps its burst).")
@db_url_option
@pass_state
def set_(state: State, key: str, rate_text: str | None, burst: int | None, db_url: str | None) -> None:
    """Create or change a rate limit; name it in a handler (rate_limit="KEY") or jobkit.toml.

    \b
    Examples:
      jobkit ratelimit set mailgun --rate 60/min --burst 10
      jobkit ratelimit set mailgun --burst 20     # the rate stays 60/min
    """
    app = state.app(db_url)
    limit = ratelimits.set_limit(app.db, app.settings, key, rate_text, burst)
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
    app = state.app(db_url)
    limits = ratelimits.list_limits(app.db, app.settings)
    if as_json:
        click.echo(json.dumps([{"key": x.key, "per_second": x.rate, "burst": x.burst,
                                "tokens": round(x.tokens, 3)} for x in limits], indent=2))
        return
    for x in limits:
        every = format_duration(timedelta(seconds=round(1 / x.rate, 3)))
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
    app = state.app(db_url)
    ratelimits.remove_limit(app.db, app.settings, key)
    click.echo(f"removed {key}")
