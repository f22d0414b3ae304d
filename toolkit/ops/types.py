"""The job types jobkit knows, so that the CLI refuses a typo instead of queueing jobs nobody serves.

A type is known when jobkit.toml declares it (``[types.X]``, ``[user_api] types``, a schedule's
``type``), a worker has served it (workers record their handlers' types when they start:
``known_types``), it is paused, or jobs of it exist. `jobkit enqueue --new-type` introduces one on
purpose (and records it). The Python API does not check (docs/guides/enqueue.md, "Unknown job types").
"""

from __future__ import annotations

import difflib

from ..config import Settings
from ..connector import Database
from ..exceptions import NotFound
from ..queries import queries
from ..validate import type_name


def declared(settings: Settings) -> set[str]:
    """The types jobkit.toml names."""
    names = set(settings.types)
    names.update(s.type for s in settings.schedules.values() if s.type is not None)
    if settings.user_api is not None:
        names.update(settings.user_api.types)
    return names


def is_known(db: Database, settings: Settings, job_type: str) -> bool:
    if job_type in declared(settings):
        return True
    with db.session() as s:
        return bool(s.scalar(queries(settings.schema)["type_known"], {"type": job_type}))


def known(db: Database, settings: Settings) -> list[str]:
    """Every known type, sorted."""
    with db.session() as s:
        rows = s.all(queries(settings.schema)["known_types"])
    return sorted(declared(settings) | {r["type"] for r in rows})


def require_known(db: Database, settings: Settings, job_type: str, *, new_type_hint: str) -> None:
    """Raise NotFound for a type jobkit has never heard of, with the closest known ones and
    ``new_type_hint`` (how to introduce it on purpose)."""
    type_name(job_type)
    if is_known(db, settings, job_type):
        return
    close = difflib.get_close_matches(job_type, known(db, settings), n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(close)}? " if close else ""
    raise NotFound(f"job type {job_type!r} is unknown: jobkit.toml does not declare it, no worker has "
                   "served it and no job has it", hint=guess + new_type_hint)


def introduce(db: Database, settings: Settings, job_type: str) -> None:
    """Record ``job_type`` as known (`jobkit enqueue --new-type`)."""
    with db.session() as s:
        s.execute(queries(settings.schema)["record_types"], {"types": [type_name(job_type)]})
