"""The packaged migrations ("0001_baseline", ...) and the head version, for tests that count them."""

from __future__ import annotations

from jobkit.config import Settings
from jobkit.schema.render import render_migrations

MIGRATIONS = [f"{m.version}_{m.name}" for m in render_migrations(Settings())]
HEAD = MIGRATIONS[-1][:4]
