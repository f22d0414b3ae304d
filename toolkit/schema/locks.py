"""How long a deploy may make a live queue wait for its locks: a short lock_timeout, then retries.

A DDL statement that needs ACCESS EXCLUSIVE on ``jobs`` queues behind the transactions holding it, and
every enqueue and claim that arrives meanwhile queues behind the DDL. ``lock_timeout`` bounds that
wait; when it runs out (SQLSTATE 55P03, or a deadlock, 40P01) the unit is rolled back, nothing of it
is left, and it is tried again after a pause that doubles each time, a bounded number of times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from ..connector import sqlstate
from ..durations import format_duration
from ..exceptions import DatabaseError

T = TypeVar("T")
Echo = Callable[[str], None]

#: lock_not_available (lock_timeout ran out) and deadlock_detected: another session held a lock.
LOCK_STATES = ("55P03", "40P01")


@dataclass(frozen=True)
class Retry:
    """``attempts`` tries in all; after the n-th failed one, a pause of ``backoff * 2**(n-1)``, at most
    ``cap``. The default tries once (direct callers of migrations.apply); deploy passes its own."""

    attempts: int = 1
    backoff: timedelta = timedelta(milliseconds=250)
    cap: timedelta = timedelta(seconds=8)

    def pause(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th (1-based) failed try."""
        return float(min(self.cap.total_seconds(), self.backoff.total_seconds() * 2 ** (attempt - 1)))

    def budget(self, lock_timeout: timedelta) -> float:
        """The longest a unit can take to give up: every try's lock wait plus the pauses between."""
        waits = self.attempts * lock_timeout.total_seconds()
        return waits + sum(self.pause(n) for n in range(1, self.attempts))


def lock_conflict(exc: DatabaseError) -> bool:
    """True when ``exc`` says another session held a lock too long (not that the SQL is wrong)."""
    return sqlstate(exc) in LOCK_STATES or "lock timeout" in exc.message


def retrying(what: str, retry: Retry, lock_timeout: timedelta, run: Callable[[], T],
             echo: Echo | None = None) -> T:
    """``run()`` (one unit that rolls itself back on failure), tried again on a lock conflict."""
    for attempt in range(1, max(1, retry.attempts) + 1):
        try:
            return run()
        except DatabaseError as exc:
            if not lock_conflict(exc) or attempt >= retry.attempts:
                raise
            pause = retry.pause(attempt)
            if echo is not None:
                echo(f"{what}: a lock was not granted within {format_duration(lock_timeout)} "
                     f"(attempt {attempt} of {retry.attempts}); rolled back, trying again in {pause:g}s")
            time.sleep(pause)
    raise AssertionError("unreachable")  # the last attempt returns or raises


def gave_up_hint(lock_timeout: timedelta, retry: Retry) -> str:
    """The fix, when every try ran out of lock_timeout."""
    return (
        f"another session held a conflicting lock through {retry.attempts} attempt(s) of "
        f"{format_duration(lock_timeout)} each (about {retry.budget(lock_timeout):.0f}s in all); find it in "
        "pg_stat_activity (a long transaction on jobkit's tables), end it, and run `jobkit deploy` again, "
        "or give the deploy more room with --lock-attempts / --lock-timeout"
    )
