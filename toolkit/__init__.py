"""jobkit: Postgres-native background jobs for Supabase.

    import jobkit

    jobs = jobkit.Registry()

    @jobs.handler("send_email", max_attempts=5, rate_limit="mailgun")
    async def send_email(payload, ctx):
        ...

    jobkit.enqueue(db_url_or_connection, "send_email", {"to": "a@example.com"})
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .config import Settings, load_settings
from .context import JobContext
from .enqueue import enqueue, enqueue_async, enqueue_many, enqueue_many_async
from .exceptions import JobkitError
from .handlers import Permanent, RateLimited, Registry, Retry
from .jobs import Job, NewJob, Status
from .worker.backends.memory import MemoryBackend
from .worker.backends.postgres import PostgresBackend
from .worker.endpoint import WorkerEndpoint, create_app

try:
    __version__ = version("jobkit-pg")  # the distribution's name; the import is jobkit
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    __version__ = "0.0.0+unknown"

__all__ = [
    "Job", "JobContext", "JobkitError", "MemoryBackend", "NewJob", "Permanent", "PostgresBackend",
    "RateLimited", "Registry", "Retry", "Settings", "Status", "WorkerEndpoint", "__version__", "create_app",
    "enqueue", "enqueue_async", "enqueue_many", "enqueue_many_async", "load_settings",
]
