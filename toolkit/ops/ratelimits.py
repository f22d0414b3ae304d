"""`jobkit ratelimit`: token buckets in the database, shared by every worker instance."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..config import Settings
from ..connector import Database
from ..exceptions import ConfigError
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


def set_limit(db: Database, settings: Settings, key: str, rate_text: str, burst: int) -> RateLimit:
    """Create or change a limit: ``rate_text`` like "60/min"; ``burst`` tokens at most."""
    type_name(key)
    per_second = rate(rate_text, "--rate")
    integer(burst, "--burst", 1, 1_000_000)
    with db.session() as s:
        s.execute(queries(settings.schema)["ratelimit_upsert"],
                  {"key": key, "rate": per_second, "burst": burst})
    return next(limit for limit in list_limits(db, settings) if limit.key == key)


def list_limits(db: Database, settings: Settings) -> list[RateLimit]:
    with db.session() as s:
        rows = s.all(queries(settings.schema)["ratelimits_all"])
    return [RateLimit(r["key"], r["rate"], r["burst"], r["tokens"], r["updated_at"]) for r in rows]


def remove_limit(db: Database, settings: Settings, key: str) -> None:
    with db.session() as s:
        if s.one(queries(settings.schema)["ratelimit_delete"], {"key": key}) is None:
            raise ConfigError(f"no rate limit named {key}", hint="see `jobkit ratelimit list`")
