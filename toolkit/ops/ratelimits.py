"""`jobkit ratelimit`: token buckets in the database, shared by every worker instance."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..config import Settings
from ..connector import Database
from ..exceptions import ConfigError, NotFound
from ..queries import queries
from ..validate import integer, rate, type_name


@dataclass(frozen=True)
class RateLimit:
    key: str
    rate: float  # tokens per second
    burst: int
    tokens: float
    updated_at: datetime

    @property
    def per_minute(self) -> float:
        return self.rate * 60


def set_limit(db: Database, settings: Settings, key: str, rate_text: str | None,
              burst: int | None) -> RateLimit:
    """Create or change a limit: ``rate_text`` like "60/min"; ``burst`` tokens at most. A field not
    given keeps its current value (a new limit needs a rate; its burst defaults to 1)."""
    type_name(key)
    per_second = None if rate_text is None else rate(rate_text, "--rate")
    if burst is not None:
        integer(burst, "--burst", 1, 1_000_000)
    current = {limit.key: limit for limit in list_limits(db, settings)}.get(key)
    if current is None and per_second is None:
        raise ConfigError(f"rate limit {key} does not exist yet: give its --rate",
                          hint=f"jobkit ratelimit set {key} --rate 60/min --burst 10")
    if per_second is None and burst is None:
        raise ConfigError("nothing to change: give --rate, --burst or both",
                          hint="see `jobkit ratelimit set -h`")
    new_rate = per_second if per_second is not None else current.rate  # type: ignore[union-attr]
    new_burst = burst if burst is not None else (current.burst if current else 1)
    with db.session() as s:
        s.execute(queries(settings.schema)["ratelimit_upsert"],
                  {"key": key, "rate": new_rate, "burst": new_burst})
    return next(limit for limit in list_limits(db, settings) if limit.key == key)


def list_limits(db: Database, settings: Settings) -> list[RateLimit]:
    with db.session() as s:
        rows = s.all(queries(settings.schema)["ratelimits_all"])
    return [RateLimit(r["key"], r["rate"], r["burst"], r["tokens"], r["updated_at"]) for r in rows]


def remove_limit(db: Database, settings: Settings, key: str) -> None:
    with db.session() as s:
        if s.one(queries(settings.schema)["ratelimit_delete"], {"key": key}) is None:
            raise NotFound(f"no rate limit named {key}", hint="see `jobkit ratelimit list`")
