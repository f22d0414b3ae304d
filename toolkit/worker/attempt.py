"""One attempt, typed: where it stands in this worker (Phase), how its handler ended (Returned or
Raised: ``Ended``) and what became of it (Outcome). Defined here once; the Drainer, the Recorder,
the drain summaries and the trace spans speak these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..retries import RateLimited


class Phase(StrEnum):
    """Where a claimed job stands in its worker."""

    WAITING = "waiting"  # claimed, waiting for a runner slot
    RUNNING = "running"  # its handler runs
    RECORDING = "recording"  # its outcome was handed to a statement
    REFUSED = "refused"  # its result could not be stored: its attempt is recorded as failed instead
    RELEASED = "released"  # handed back (shutdown), attempt not consumed
    ABANDONED = "abandoned"  # left to its lease: its sync handler's thread outlived the shutdown
    CANCELLED = "cancelled"  # cancel_job stopped it while this worker held it: nothing recorded


class Outcome(StrEnum):
    """What became of an attempt (the jobkit.job.outcome of its spans; completed, retry, failed,
    snoozed and released are also job_history's words for them)."""

    COMPLETED = "completed"  # the handler returned and its result is stored
    RETRY = "retry"  # it failed and the job is pending again (backoff)
    FAILED = "failed"  # it failed for good (Permanent, or its last attempt)
    SNOOZED = "snoozed"  # RateLimited: pending again, the attempt not consumed
    RELEASED = "released"  # handed back by a stopping worker, the attempt not consumed
    CANCELLED = "cancelled"  # cancel_job stopped it while it ran: nothing more recorded
    LOST = "lost"  # fenced out: the attempt no longer held its job when its outcome arrived
    UNRECORDED = "unrecorded"  # its statement failed: the lease expires and the sweep retries it

    @property
    def failed(self) -> bool:
        """An error for the trace (its spans' status)."""
        return self in (Outcome.FAILED, Outcome.UNRECORDED)


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned: its result as JSON text to store (None: null)."""

    result: str | None


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler (or jobkit around it: a timeout, a missing handler) ended the attempt with
    ``error``."""

    error: BaseException

    @property
    def snooze(self) -> RateLimited | None:
        """The RateLimited that snoozes the job (None: the attempt failed)."""
        return self.error if isinstance(self.error, RateLimited) else None


#: How a handler ended its attempt.
Ended = Returned | Raised
