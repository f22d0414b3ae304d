"""`jobkit pause` / `jobkit resume`: stop claiming a job type, or one concurrency key of it, in every
worker at once (jobkit.pauses, read by every claim), and start again (resuming wakes the workers)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..config import Settings
from ..connector import Database
from ..exceptions import ConfigError
from ..queries import queries
from ..validate import type_name


@dataclass(frozen=True)
class Pause:
    type: str
    key: str | None  # None: the whole type
    paused_at: datetime

    @property
    def target(self) -> str:
        return self.type if self.key is None else f"{self.type} key {self.key!r}"


def pause(db: Database, settings: Settings, job_type: str, key: str | None = None) -> bool:
    """Pause ``job_type`` (or its ``key``); False when it was paused already."""
    return _change(db, settings, "pause_type", job_type, key)


def resume(db: Database, settings: Settings, job_type: str, key: str | None = None) -> bool:
    """Resume ``job_type`` (or its ``key``) and wake the workers; False when it was not paused."""
    return _change(db, settings, "resume_type", job_type, key)


def list_pauses(db: Database, settings: Settings) -> list[Pause]:
    with db.session() as s:
        rows = s.all(queries(settings.schema)["pauses_all"])
    return [Pause(r["type"], r["key"], r["paused_at"]) for r in rows]


def check(job_type: str, key: str | None) -> None:
    """A pause's target is a valid type name and, if given, a key of 1 to 1000 characters."""
    type_name(job_type)
    if key is not None and not 1 <= len(key) <= 1000:
        raise ConfigError(f"--key must be 1 to 1000 characters, got {len(key)}")


def _change(db: Database, settings: Settings, query: str, job_type: str, key: str | None) -> bool:
    check(job_type, key)
    with db.session() as s:
        return bool(s.scalar(queries(settings.schema)[query], {"type": job_type, "key": key}))
