"""jobkit's pg_cron jobs: list, add, remove, pause, resume, and deploy's declarative sync.

jobkit touches only cron jobs named with its prefix in its own database, never the user's others.
pg_cron runs in one database (cron.database_name); when jobkit lives in another one, every job is
created with cron.schedule_in_database from a session on the cron database.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..config import Settings
from ..connector import Database, Session
from ..exceptions import ConfigError, PrerequisiteError
from ..names import MAX_NAME_BYTES, cron_job_name, cron_prefix
from ..queries import queries
from .spec import Version, parse_version, validate

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class CronSite:
    """Where jobkit's cron jobs live and what that pg_cron can do."""

    jobkit_database: str
    cron_database: str
    version: Version | None
    prefix: str


@dataclass(frozen=True)
class Desired:
    """A schedule as jobkit wants it in cron.job, and the database its command runs in (jobkit's,
    or pg_cron's own for cleaning cron's tables)."""

    name: str
    schedule: str
    command: str
    target: str
    database: str


@dataclass(frozen=True)
class CronJob:
    """One of jobkit's rows in cron.job, with its last run."""

    jobid: int
    name: str
    schedule: str
    command: str
    database: str
    active: bool
    last_start: datetime | None
    last_status: str | None
    last_message: str | None


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise ConfigError(
            f"schedule name {name!r} is not valid",
            hint="use 1-40 lower-case letters, digits, _ and -, starting with a letter or digit",
        )
    return name


class CronJobs:
    """jobkit's cron jobs for one jobkit database."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.q = queries(settings.schema)
        self.site = self._site()

    def list(self) -> list[CronJob]:
        return schedules_of(self.every())

    def every(self) -> builtins.list[CronJob]:
        """Every cron job with jobkit's prefix here: the schedules, and the one-off jobs of "run
        now" (toolkit/cron/runnow.py), whose names are no schedule's."""
        with self._cron_session() as s:
            rows = s.all(self.q["cron_jobs"], {"prefix": self.site.prefix,
                                                "databases": [self.site.jobkit_database,
                                                              self.site.cron_database]})
        return [_cron_job(r, self.site.prefix) for r in rows]

    def call(self) -> AbstractContextManager[Session]:
        """A transaction on the cron database, search_path pinned (for "run now": runnow.py)."""
        return self._cron_call()

    def recent_runs(self, jobids: Sequence[int], each: int) -> builtins.list[dict[str, Any]]:
        """The newest ``each`` runs of each of these jobs, from cron.job_run_details."""
        with self._cron_session() as s:
            found: builtins.list[dict[str, Any]] = s.all(self.q["cron_recent_runs"],
                                                         {"jobids": list(jobids), "limit": each})
        return found

    def find(self, name: str) -> CronJob | None:
        return next((j for j in self.list() if j.name == name), None)

    def create(self, want: Desired) -> int:
        self.check(want)
        with self._cron_call() as s:
            return int(s.scalar(self.q["cron_schedule_in_database"], {
                "name": cron_job_name(self.site.prefix, want.name), "schedule": want.schedule,
                "command": want.command, "database": want.database}))

    def update(self, job: CronJob, want: Desired) -> None:
        """Change schedule and command; a paused job stays paused."""
        self.check(want)
        self._alter(job.jobid, schedule=want.schedule, command=want.command,
                    database=want.database)

    def set_active(self, job: CronJob, active: bool) -> None:
        self._alter(job.jobid, active=active)

    def delete(self, job: CronJob) -> None:
        with self._cron_call() as s:
            s.scalar(self.q["cron_unschedule"], {"jobid": job.jobid})

    def _alter(self, jobid: int, **changes: Any) -> None:
        params = {"jobid": jobid, "schedule": None, "command": None, "active": None,
                  "database": None, **changes}
        with self._cron_call() as s:
            s.execute(self.q["cron_alter_job"], params)

    def check(self, want: Desired) -> None:
        """Raise ConfigError unless pg_cron here would take ``want`` as it is."""
        check_name(want.name)
        validate(want.schedule, self.site.version)
        name = cron_job_name(self.site.prefix, want.name)
        if len(name.encode()) > MAX_NAME_BYTES:
            room = MAX_NAME_BYTES - len(self.site.prefix.encode())
            raise ConfigError(
                f"cron job name {name!r} is longer than pg_cron's {MAX_NAME_BYTES} bytes",
                hint=f"the name carries the prefix {self.site.prefix!r} (database and schema): use a "
                "shorter schema setting"
                + (f", or a schedule name of at most {room} characters" if room > 0 else ""),
            )

    def _site(self) -> CronSite:
        with self.db.session() as s:
            row = s.one(self.q["cron_site"]) or {}
        database = str(row["database"])
        cron_db = row.get("cron_database") or (database if row.get("cron_version") else "postgres")
        version = parse_version(row.get("cron_version"))
        if version is None:
            with self.db.with_dbname(cron_db).session() as s:
                version = parse_version(s.scalar(self.q["cron_version"]))
        if version is None:
            raise PrerequisiteError(
                f"the pg_cron extension is not created in database {cron_db}",
                hint=f"run `create extension pg_cron` in {cron_db} "
                "(on Supabase: enable the Cron integration)",
            )
        return CronSite(database, cron_db, version, cron_prefix(database, cron_db, self.settings.schema))

    def _cron_session(self) -> Any:
        target = self.db if self.site.cron_database == self.site.jobkit_database else (
            self.db.with_dbname(self.site.cron_database))
        return target.session()

    @contextmanager
    def _cron_call(self) -> Iterator[Session]:
        """A transaction on the cron database with search_path pinned to pg_catalog: pg_cron's own
        functions look names up through the caller's path (alter_job's queries compare with a
        bare `=`, so a planted public.=(bigint, bigint) ran in them with `public` first)."""
        with self._cron_session() as s, s.transaction():
            s.execute(self.q["pin_search_path"])
            yield s


def schedules_of(jobs: Sequence[CronJob]) -> list[CronJob]:
    """The schedules among jobkit's cron jobs (not the one-offs of "run now")."""
    return [j for j in jobs if _NAME_RE.fullmatch(j.name)]


def origins(session: Session, settings: Settings) -> dict[str, str]:
    return {r["name"]: r["origin"] for r in session.all(queries(settings.schema)["schedule_origins"])}


def set_origin(session: Session, settings: Settings, name: str, origin: str | None) -> None:
    q = queries(settings.schema)
    if origin is None:
        session.execute(q["schedule_origin_delete"], {"name": name})
    else:
        session.execute(q["schedule_origin_set"], {"name": name, "origin": origin})


def _cron_job(row: dict[str, Any], prefix: str) -> CronJob:
    return CronJob(
        jobid=int(row["jobid"]), name=str(row["jobname"])[len(prefix):], schedule=row["schedule"],
        command=row["command"], database=row["database"], active=bool(row["active"]),
        last_start=row["last_start"], last_status=row["last_status"], last_message=row["last_message"],
    )
