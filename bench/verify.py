"""Exactly-once checks, run after every measurement: every job ran once and is recorded as done
once, by the handler's own tally and by the system's tables. A run that fails its check is
reported as FAILED instead of a figure."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row


@dataclass
class Tally:
    """What the handlers saw: how many calls, and which job ids."""

    calls: int = 0
    ids: set[Any] = field(default_factory=set)
    first: float | None = None  # time.monotonic() of the first call

    def hit(self, job_id: Any) -> None:
        if self.first is None:
            self.first = time.monotonic()
        self.calls += 1
        self.ids.add(job_id)

    def since_first(self, end: float) -> float:
        """Seconds from the first handler call to ``end`` (a time.monotonic() reading)."""
        if self.first is None:
            raise RuntimeError("no job was handled")
        return end - self.first

    def export(self, end: float) -> dict[str, Any]:
        """For a drain process to hand to its parent."""
        return {"first": self.first, "end": end, "calls": self.calls, "ids": [str(i) for i in self.ids]}

    def merge(self, calls: int, ids: Iterable[Any], first: float | None = None) -> None:
        self.calls += calls
        self.ids.update(ids)
        if first is not None and (self.first is None or first < self.first):
            self.first = first


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str

    def __bool__(self) -> bool:
        return self.ok


def _one(url: str, sql: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return row


def _tally(tally: Tally | None, n: int, problems: list[str]) -> None:
    if tally is not None and (tally.calls != n or len(tally.ids) != n):
        problems.append(f"handler ran {tally.calls} times for {len(tally.ids)} distinct jobs, expected {n}")


def _verdict(problems: list[str], n: int) -> Check:
    return Check(not problems, "; ".join(problems) or f"exactly-once ok ({n} jobs)")


def jobkit(url: str, n: int, tally: Tally | None = None, *, pruned: int = 0, retried: int = 0) -> Check:
    """``n`` jobs ran: completed exactly once each (``pruned`` of them already deleted by prune;
    ``retried`` of them on their second attempt after one retry)."""
    jobs = _one(url, """select count(*) filter (where status = 'completed') as completed,
        count(*) filter (where status in ('pending', 'processing')) as open,
        count(*) filter (where status not in ('completed', 'pending', 'processing')) as other,
        count(*) filter (where attempts <> 1) as reattempted from jobkit.jobs""")
    # A completing attempt is recorded on the job row (sql/schema.sql); any row in job_attempts is
    # an attempt that did not complete (a retry, an expired lease, a release): none may exist.
    hist = _one(url, "select count(*) as rows, string_agg(distinct outcome, ', ') as outcomes "
                     "from jobkit.job_attempts")
    problems = []
    if jobs["completed"] + pruned != n:
        problems.append(f"{jobs['completed']} completed + {pruned} pruned jobs, expected {n}")
    if jobs["open"] or jobs["other"] or jobs["reattempted"] != retried:
        problems.append(f"{jobs['open']} pending/processing, {jobs['other']} failed/dead/cancelled, "
                        f"{jobs['reattempted']} with attempts <> 1 (expected {retried})")
    if hist["rows"] != retried or (retried and hist["outcomes"] != "retry"):
        problems.append(f"job_attempts: {hist['rows']} attempts that did not complete ({hist['outcomes']}), "
                        f"expected {retried} retries")
    _tally(tally, n, problems)
    return _verdict(problems, n)


def jobkit_enqueued(url: str, n: int) -> Check:
    row = _one(url, "select count(*) as total, count(*) filter (where status = 'pending') as pending, "
                    "count(distinct id) as ids from jobkit.jobs")
    ok = row["total"] == row["pending"] == row["ids"] == n
    return Check(ok, f"{row['total']} rows ({row['pending']} pending, {row['ids']} ids), expected {n}")


def jobkit_claimed(url: str, claimed: int, *, expected: int, pending: int) -> Check:
    """A claim-cost run: every claimed job was claimed once and completed once; the rest pending."""
    row = _one(url, """select count(*) filter (where status = 'completed' and attempts = 1) as done,
        count(*) filter (where status = 'pending' and attempts = 0) as pending,
        count(*) filter (where status not in ('completed', 'pending')) as other,
        (select count(*) from jobkit.job_attempts) as history
        from jobkit.jobs""")
    ok = (claimed == expected == row["done"] and row["pending"] == pending
          and not row["other"] and not row["history"])
    return Check(ok, f"exactly-once ok ({claimed} claimed and completed)" if ok else
                 f"claimed {claimed} (expected {expected}); {row['done']} completed, {row['history']} "
                 f"attempts that did not complete, {row['pending']} pending (expected {pending}), "
                 f"{row['other']} other")


def pgqueuer(url: str, n: int, tally: Tally | None = None) -> Check:
    """PgQueuer deletes a finished job and logs it: the queue is empty, the log has n successes."""
    queue = _one(url, "select count(*) as left from pgqueuer")
    log = _one(url, """select count(*) filter (where status = 'successful') as ok,
        count(distinct job_id) filter (where status = 'successful') as distinct_jobs,
        count(*) filter (where status not in ('successful', 'queued', 'picked')) as other
        from pgqueuer_log""")
    problems = []
    if queue["left"]:
        problems.append(f"{queue['left']} jobs left in the queue")
    if log["ok"] != n or log["distinct_jobs"] != n or log["other"]:
        problems.append(f"log: {log['ok']} successful rows for {log['distinct_jobs']} jobs, "
                        f"{log['other']} other, expected {n}")
    _tally(tally, n, problems)
    return _verdict(problems, n)


def pgqueuer_enqueued(url: str, n: int) -> Check:
    row = _one(url, "select count(*) as total, count(*) filter (where status = 'queued') as queued "
                    "from pgqueuer")
    return Check(row["total"] == row["queued"] == n,
                 f"{row['total']} rows ({row['queued']} queued), expected {n}")


def procrastinate(url: str, n: int, tally: Tally | None = None) -> Check:
    jobs = _one(url, """select count(*) filter (where status = 'succeeded') as ok,
        count(*) filter (where status <> 'succeeded') as other,
        count(*) filter (where attempts <> 1) as retried from procrastinate_jobs""")
    started = _one(url, "select count(*) as n, count(distinct job_id) as jobs from procrastinate_events "
                        "where type = 'started'")
    problems = []
    if jobs["ok"] != n or jobs["other"] or jobs["retried"]:
        problems.append(f"{jobs['ok']} succeeded, {jobs['other']} other, {jobs['retried']} retried, "
                        f"expected {n}")
    if started["n"] != n or started["jobs"] != n:
        problems.append(f"{started['n']} 'started' events for {started['jobs']} jobs, expected {n}")
    _tally(tally, n, problems)
    return _verdict(problems, n)


def procrastinate_enqueued(url: str, n: int) -> Check:
    row = _one(url, "select count(*) as total, count(*) filter (where status = 'todo') as todo "
                    "from procrastinate_jobs")
    return Check(row["total"] == row["todo"] == n, f"{row['total']} rows ({row['todo']} todo), expected {n}")


def raw(url: str, n: int) -> Check:
    row = _one(url, """select count(*) filter (where status = 'completed' and attempts = 1) as once,
        count(*) filter (where status <> 'completed' or attempts <> 1) as other from raw_jobs""")
    ok = row["once"] == n and row["other"] == 0
    return Check(ok, f"exactly-once ok ({n} jobs)" if ok else
                 f"{row['once']} completed once, {row['other']} not, expected {n}")
