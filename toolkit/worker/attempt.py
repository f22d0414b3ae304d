"""One attempt, typed: where it stands in this worker (Phase), why jobkit stopped it (Interrupt),
how its handler ended (Returned or Raised: ``Ended``) and what became of it (Outcome, from the
first two by ``settle``). Defined here once; the Drainer, tending, the Recorder, the drain summaries
and the trace spans speak these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..retries import RateLimited
from .waits import Suspend


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
    WAITED = "waited"  # ctx.sleep / wait_for_event / ...: the job waits, the attempt not consumed
    RELEASED = "released"  # handed back by a stopping worker, the attempt not consumed
    CANCELLED = "cancelled"  # cancel_job stopped it while it ran: nothing more recorded
    LOST = "lost"  # fenced out: the attempt no longer held its job when its outcome arrived
    UNRECORDED = "unrecorded"  # its statement failed: the lease expires and the sweep retries it

    @property
    def failed(self) -> bool:
        """An error for the trace (its spans' status)."""
        return self in (Outcome.FAILED, Outcome.UNRECORDED)


class Interrupt(StrEnum):
    """Why jobkit stopped an attempt before its handler ended it (an attempt's ``interrupt``; None:
    nothing did). An attempt holds one; when two happen, the stronger wins (``stronger``), whatever
    their order: CANCELLED over TIMED_OUT over SHUTDOWN. cancel_job has already recorded a cancelled
    attempt, so nothing the worker could record would change the job; a timed-out attempt fails
    (a retry) rather than being handed back by a stopping worker."""

    SHUTDOWN = "shutdown"  # the worker stops: its job is released (or left to its lease)
    TIMED_OUT = "timed_out"  # past its handler's timeout: it fails with a TimeoutError
    CANCELLED = "cancelled"  # cancel_job stopped the job while this worker held it: nothing recorded


_STRENGTH = {Interrupt.SHUTDOWN: 1, Interrupt.TIMED_OUT: 2, Interrupt.CANCELLED: 3}


def stronger(current: Interrupt | None, new: Interrupt) -> Interrupt:
    """The interrupt an attempt holds once ``new`` happened to it as well (the rule above)."""
    if current is None or _STRENGTH[new] > _STRENGTH[current]:
        return new
    return current


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

    @property
    def wait(self) -> Suspend | None:
        """The Suspend that makes the job wait (ctx.sleep & co; None: not a wait)."""
        return self.error if isinstance(self.error, Suspend) else None


#: How a handler ended its attempt.
Ended = Returned | Raised

#: A handler that returned None (the commonest result): one shared instance, no allocation per job.
RETURNED_NONE = Returned(None)


def settle(ended: Ended | None, interrupt: Interrupt | None, timeout: float) -> Ended | Outcome:
    """What becomes of an attempt, from how its handler ended (None: jobkit cancelled its runner
    first) and why jobkit stopped it: an Ended to record (its statement's answer makes it completed,
    retry, failed, snoozed, lost or unrecorded), or the Outcome it has without a statement."""
    if interrupt is Interrupt.CANCELLED:
        return Outcome.CANCELLED  # cancel_job recorded it: a late result or a timeout is dropped
    if ended is not None:
        return ended  # its handler ended by itself (even past its timeout)
    if interrupt is Interrupt.TIMED_OUT:
        return Raised(TimeoutError(f"handler timed out after {timeout:g}s; the attempt was abandoned"))
    return Outcome.RELEASED  # the worker stops: released once its handler has ended (or left to its lease)
