"""The worker's Prometheus metrics (``GET /metrics``, prometheus_client's text format).

The Drainer and its Recorder report to an :class:`Observer` at four places (a claim returned, a
handler finished, an outcome statement returned, an attempt failed); :class:`WorkerMetrics` turns
that into counters and histograms in a registry of its own (several endpoints in one process do
not mix). The backlog and the oldest due job per type come from one query over the pending rows,
and the fleet's workers by state (``jobkit_workers``: alive, stale, gone) from the workers table,
both cached for ``ttl`` seconds so that scrapes do not load the database.

Exposed worker: ``/metrics`` answers only with ``Authorization: Bearer $JOBKIT_METRICS_TOKEN``, or,
with no token configured, only to clients on the loopback interface.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

Backlog = Callable[[], Awaitable[list[dict[str, Any]]]]
WORKER_STATES = ("alive", "stale", "gone")  # sql/functions/75_workers.sql's worker_state
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
STATEMENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Observer(Protocol):
    """What the Drainer tells whoever watches it (every method cheap, never raising)."""

    def claimed(self, job_type: str, count: int, seconds: float) -> None: ...

    def ran(self, job_type: str, seconds: float) -> None: ...

    def completed(self, job_type: str, count: int) -> None: ...

    def failed(self, job_type: str, final: bool) -> None: ...

    def snoozed(self, job_type: str) -> None: ...

    def recorded(self, seconds: float) -> None: ...


class Quiet:
    """The Observer when nobody watches."""

    def claimed(self, job_type: str, count: int, seconds: float) -> None:
        return None

    def ran(self, job_type: str, seconds: float) -> None:
        return None

    def completed(self, job_type: str, count: int) -> None:
        return None

    def failed(self, job_type: str, final: bool) -> None:
        return None

    def snoozed(self, job_type: str) -> None:
        return None

    def recorded(self, seconds: float) -> None:
        return None


class WorkerMetrics:
    """An Observer that keeps Prometheus metrics, and renders them with a fresh-enough backlog."""

    def __init__(self, backlog: Backlog | None = None, *, ttl: float = 15.0,
                 drains: Callable[[], int] | None = None,
                 tasks_down: Callable[[], int] | None = None, workers: Backlog | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._claimed = Counter("jobkit_jobs_claimed", "Jobs claimed by this worker.", ["type"], registry=r)
        self._completed = Counter("jobkit_jobs_completed", "Jobs completed (result stored).", ["type"],
                                  registry=r)
        self._retried = Counter("jobkit_jobs_retried", "Failed attempts with a retry scheduled.", ["type"],
                                registry=r)
        self._failed = Counter("jobkit_jobs_failed", "Jobs out of attempts (dead-lettered by sweep_dead).",
                               ["type"], registry=r)
        self._snoozed = Counter("jobkit_jobs_snoozed", "Attempts snoozed (rate limits, 429s).", ["type"],
                                registry=r)
        self._handler = Histogram("jobkit_handler_duration_seconds", "Handler run time.", ["type"],
                                  buckets=DURATION_BUCKETS, registry=r)
        self._claim = Histogram("jobkit_claim_duration_seconds", "claim_jobs round trips.",
                                buckets=STATEMENT_BUCKETS, registry=r)
        self._record = Histogram("jobkit_record_duration_seconds",
                                 "Outcome statements (complete_jobs / fail_jobs) round trips.",
                                 buckets=STATEMENT_BUCKETS, registry=r)
        self._drains = Gauge("jobkit_drains_in_flight", "Drains running in this worker.", registry=r)
        if drains is not None:
            self._drains.set_function(lambda: float(drains()))
        self._backlog = Gauge("jobkit_backlog_jobs", "Pending jobs due now, by type (cached).", ["type"],
                              registry=r)
        self._oldest = Gauge("jobkit_oldest_due_seconds",
                             "Age of the oldest due pending job, by type (cached).", ["type"], registry=r)
        self._down = Gauge("jobkit_worker_tasks_down",
                           "Long-lived worker tasks down now (restarting after a failure).", registry=r)
        if tasks_down is not None:
            self._down.set_function(lambda: float(tasks_down()))
        self._workers = Gauge("jobkit_workers", "Worker processes in the workers table, by state (cached).",
                              ["state"], registry=r)
        self._invalid = Counter("jobkit_notifications_invalid",
                                "NOTIFY payloads on the wake channel that were not wake-ups (ignored).",
                                registry=r)
        self._ran: dict[str, Any] = {}
        self._done: dict[str, Any] = {}
        self._fetch = backlog
        self._fetch_workers = workers
        self._ttl = ttl
        self._fetched_at = -float("inf")

    # ---- the Observer ---------------------------------------------------------------------------------

    def claimed(self, job_type: str, count: int, seconds: float) -> None:
        self._claim.observe(seconds)
        if count:
            self._claimed.labels(job_type).inc(count)

    def ran(self, job_type: str, seconds: float) -> None:
        child = self._ran.get(job_type)  # labels() takes a lock and builds a key: once per type
        if child is None:
            child = self._ran[job_type] = self._handler.labels(job_type)
        child.observe(seconds)

    def completed(self, job_type: str, count: int) -> None:
        child = self._done.get(job_type)
        if child is None:
            child = self._done[job_type] = self._completed.labels(job_type)
        child.inc(count)

    def failed(self, job_type: str, final: bool) -> None:
        (self._failed if final else self._retried).labels(job_type).inc()

    def snoozed(self, job_type: str) -> None:
        self._snoozed.labels(job_type).inc()

    def recorded(self, seconds: float) -> None:
        self._record.observe(seconds)

    def invalid_notification(self) -> None:
        self._invalid.inc()

    # ---- the scrape -----------------------------------------------------------------------------------

    async def render(self) -> bytes:
        """The text exposition, with the backlog refreshed when older than ``ttl``."""
        if self._fetch is not None and time.monotonic() - self._fetched_at >= self._ttl:
            rows = await self._fetch()
            self._fetched_at = time.monotonic()
            self._backlog.clear()
            self._oldest.clear()
            for row in rows:
                self._backlog.labels(row["type"]).set(row["due"])
                self._oldest.labels(row["type"]).set(row["oldest_due_s"] or 0.0)
            await self._refresh_workers()
        return generate_latest(self.registry)

    async def _refresh_workers(self) -> None:
        if self._fetch_workers is None:
            return
        counts = {row["state"]: int(row["n"]) for row in await self._fetch_workers()}
        for state in WORKER_STATES:
            self._workers.labels(state).set(counts.get(state, 0))


def allowed(token: str | None, authorization: str | None, client_host: str | None) -> bool:
    """Whether a scrape may see the metrics: the bearer token when one is configured, else only
    loopback clients."""
    if token:
        given = (authorization or "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())
    return client_host in LOOPBACK
