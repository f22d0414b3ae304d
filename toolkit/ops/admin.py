"""`jobkit jobs`: look at jobs and purge them (retry, cancel and delete: operate.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from ..config import Settings
from ..connector import Database
from ..exceptions import ConfigError, NotFound
from ..jobs import Attempt, Job, Status
from ..lifecycle import Lifecycle
from ..queries import queries

PURGEABLE = ("completed", "dead", "cancelled", "failed")


def parse_id(text: str) -> UUID:
    try:
        return UUID(text)
    except ValueError:
        raise ConfigError(
            f"{text!r} is not a job id", hint="job ids are UUIDs; see `jobkit jobs list`"
        ) from None


def list_jobs(
    db: Database, settings: Settings, *, job_type: str | None, status: str | None, limit: int,
    key: str | None = None,
) -> list[dict[str, Any]]:
    if status is not None and status not in {s.value for s in Status}:
        raise ConfigError(f"unknown status {status!r}", hint=f"one of {', '.join(s.value for s in Status)}")
    with db.session() as s:
        return s.all(
            queries(settings.schema)["jobs_list"],
            {"type": job_type, "status": status, "limit": limit, "key": key}
        )


def show(db: Database, settings: Settings, job_id: UUID) -> tuple[Job, list[Attempt]]:
    with db.session() as s:
        manager = Lifecycle(s, settings.schema)
        return _existing(manager, job_id), manager.history(job_id)


def attempt_limit(db: Database, settings: Settings, job_id: UUID) -> int:
    """The attempt limit of the job's round (docs/concepts.md, "Leases, fencing and attempts")."""
    with db.session() as s:
        return int(s.scalar(queries(settings.schema)["job_attempt_limit"], {"id": job_id}))


def tries(attempts: int, round_start: int, limit: int) -> str:
    """``1/3``: the attempts of the job's round out of its limit; after a retry_job (a fresh round)
    also how many in all, ``1/3 (4 in all)``."""
    text = f"{attempts - round_start}/{limit}"
    return f"{text} ({attempts} in all)" if round_start else text


def purge_count(
    db: Database, settings: Settings, status: str, older_than: timedelta, job_type: str | None
) -> int:
    _check_purgeable(status)
    with db.session() as s:
        return int(
            s.scalar(
                queries(settings.schema)["jobs_purge_count"],
                {"status": status, "older_than": older_than, "type": job_type},
            )
        )


def purge(
    db: Database,
    settings: Settings,
    status: str,
    older_than: timedelta,
    job_type: str | None,
    progress: Callable[[int], None],
    batch: int = 5000,
) -> int:
    """Delete in batches (short transactions, locked rows skipped); returns how many."""
    _check_purgeable(status)
    total = 0
    params = {"status": status, "older_than": older_than, "type": job_type, "batch": batch}
    with db.session() as s:
        while True:
            deleted = int(s.scalar(queries(settings.schema)["jobs_purge_batch"], params))
            total += deleted
            progress(deleted)
            if deleted < batch:
                return total


def _check_purgeable(status: str) -> None:
    if status not in PURGEABLE:
        raise ConfigError(f"cannot purge {status} jobs", hint=f"purge one of: {', '.join(PURGEABLE)}")


def _existing(manager: Lifecycle, job_id: UUID) -> Job:
    job = manager.get(job_id)
    if job is None:
        raise NotFound(f"no job {job_id}", hint="see `jobkit jobs list`")
    return job
