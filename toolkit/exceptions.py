"""Every error jobkit raises on purpose.

    JobkitError                 root; carries a one-line message and a hint naming the fix
    ├── ConfigError             jobkit.toml, environment or option values are invalid
    ├── NotFound                no such job, schedule or rate limit
    ├── InvalidState            the job (or schedule) is not in a state that allows the action
    ├── NotDeployed             jobkit's schema is missing, or older than this jobkit
    ├── ResourceError           packaged SQL or templates are missing or malformed
    ├── DatabaseError           the database refused or failed a statement
    │   └── ConnectionFailed    the server cannot be reached or the URL is wrong
    ├── PrerequisiteError       the server lacks something jobkit needs (pg_cron, privileges)
    ├── DeployError             a migration failed; nothing of it was applied
    ├── DriftError              deploy --check found the database behind or changed (exit 3)
    ├── LocalDbError            the embedded local PostgreSQL cannot be started or used
    ├── WorkerGaveUp            a worker could not reach the database (or LISTEN) for too long
    ├── WaitTimeout             jobkit.wait: the job (or flow) did not finish within the timeout
    └── JobFailed               jobkit.wait: the job failed, was dead-lettered or cancelled

The CLI catches JobkitError once, prints ``error: <message>`` and ``hint: <hint>`` and exits with
``exit_code``; tracebacks only with ``-v``.
"""

from __future__ import annotations

from typing import Any


class JobkitError(Exception):
    """jobkit failed."""

    exit_code = 1
    default_hint = ""

    def __init__(self, message: str | None = None, *, hint: str | None = None) -> None:
        self.message = message or (self.__doc__ or "jobkit failed").strip()
        self.hint = hint if hint is not None else self.default_hint
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ConfigError(JobkitError):
    """The configuration is invalid."""

    default_hint = "fix jobkit.toml or the option named above"


class NotFound(JobkitError):
    """No such object."""


class InvalidState(JobkitError):
    """The object is not in a state that allows this."""


class NotDeployed(JobkitError):
    """jobkit is not deployed in this database (or is older than this jobkit)."""

    default_hint = "run `jobkit deploy`"


class ResourceError(JobkitError):
    """A packaged SQL file or template is missing or malformed."""

    default_hint = "reinstall jobkit: the package files are incomplete"


class DatabaseError(JobkitError):
    """The database refused the statement."""


class ConnectionFailed(DatabaseError):
    """Cannot connect to the database."""

    default_hint = (
        "check the URL (postgresql://user:password@host:port/dbname) and that the server is up; "
        "`jobkit db start` runs a local one"
    )


class PrerequisiteError(JobkitError):
    """The database lacks something jobkit needs."""


class DeployError(JobkitError):
    """A migration failed; it was rolled back and nothing of it was applied."""


class DriftError(JobkitError):
    """The database schema differs from what this jobkit version would deploy."""

    exit_code = 3
    default_hint = "run `jobkit deploy` to apply pending migrations and sync settings"


class LocalDbError(JobkitError):
    """The local PostgreSQL cluster cannot be used."""

    default_hint = "apt-get install postgresql-15 postgresql-15-cron"


class WorkerGaveUp(JobkitError):
    """The worker gave up: the database (or its LISTEN connection) stayed unreachable."""

    default_hint = "check that the database is up and reachable; the worker can be restarted as is"


class WaitTimeout(JobkitError):
    """The job (or every job of the flow) did not finish within the timeout."""

    default_hint = "wait longer (timeout=...), or look at it with `jobkit jobs show ID`"

    def __init__(self, message: str | None = None, *, hint: str | None = None, job_id: Any = None,
                 status: str | None = None, flow_id: Any = None, open_jobs: Any = None) -> None:
        super().__init__(message, hint=hint)
        self.job_id = job_id
        self.status = status  # the job's state when the wait gave up
        self.flow_id = flow_id  # a flow's wait: the flow
        self.open_jobs = open_jobs  # a flow's wait: {job id: status} of the jobs not ended


class JobFailed(JobkitError):
    """The job failed, was dead-lettered or was cancelled."""

    default_hint = "see every attempt with `jobkit jobs show ID`; `jobkit jobs retry ID` runs it again"

    def __init__(self, message: str | None = None, *, hint: str | None = None, job: Any = None) -> None:
        super().__init__(message, hint=hint)
        self.job = job  # the JobResult: status, error (the last error), attempts, progress
        self.job_id = getattr(job, "id", None)
        self.status = getattr(job, "status", None)
        self.error = getattr(job, "error", None)
