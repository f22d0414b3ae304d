"""jobkit: Postgres-native background jobs for Supabase.

    import jobkit

    jobs = jobkit.Registry()

    @jobs.handler("send_email", max_attempts=5, rate_limit="mailgun")
    async def send_email(payload, ctx):
        ...

    job_id = jobkit.enqueue(db_url_or_connection, "send_email", {"to": "a@example.com"})
    done = jobkit.wait(db_url, job_id, timeout=30)      # JobResult, or JobFailed / WaitTimeout
"""

from __future__ import annotations

from .config import Settings, load_settings
from .enqueue import enqueue, enqueue_async, enqueue_many, enqueue_many_async
from .events import emit, emit_async
from .exceptions import JobFailed, JobkitError, WaitTimeout
from .flows import Flow, FlowJob, FlowRun, Gathered, Parent, flow, gather
from .handlers import Registry
from .jobs import FlowResult, Job, JobResult, NewJob, Progress, Status
from .results import wait, wait_async, wait_flow, wait_flow_async
from .retries import Permanent, RateLimited, Retry
from .version import __version__
from .worker.backends.memory import MemoryBackend
from .worker.backends.postgres import PostgresBackend
from .worker.context import JobContext
from .worker.durable import StepLost
from .worker.endpoint import WorkerEndpoint, create_app
from .worker.waits import Event, EventSpec, Suspend

__all__ = [
    "Flow", "FlowJob", "FlowResult", "FlowRun", "Gathered", "Parent", "flow", "gather",
    "Event", "EventSpec", "Job", "JobContext", "JobFailed", "JobResult", "JobkitError", "MemoryBackend",
    "NewJob", "Permanent",
    "PostgresBackend", "Progress", "RateLimited", "Registry", "Retry", "Settings", "Status", "StepLost",
    "Suspend", "WaitTimeout",
    "WorkerEndpoint", "__version__", "create_app", "emit", "emit_async", "enqueue", "enqueue_async",
    "enqueue_many",
    "enqueue_many_async", "load_settings", "wait", "wait_async", "wait_flow", "wait_flow_async",
]
