"""Run a schedule now, through pg_cron itself, so the run is in cron.job_run_details like every
other run of it (the dashboard's "Run now"; issue 27).

pg_cron has no "run this job once": it fires on cron expressions, each minute at the finest in
pg_cron 1.4 (1.5 added intervals of seconds, which repeat). So "run now" schedules a one-off cron
job, named ``<prefix>now:<jobid>`` (no schedule's name has a colon: `CronJobs.list` never shows
it, deploy never touches it), running the schedule's command in the schedule's database at the
next minute pg_cron will surely see (10 s away at least), as the expression "M H D Mon *" in
pg_cron's time zone: it fires then, and would fire next a year later. So it runs once:

- in pg_cron's own database the command starts by unscheduling the job itself, in the same
  transaction (a command that fails rolls that back too, and the sweep below removes it);
- elsewhere (pg_cron in another database has no `cron` schema there), and for the failed ones,
  :func:`sweep` unschedules every one-off whose minute has passed; every "run now" sweeps first.

The same expression and functions work on pg_cron 1.4 and 1.6 (cron.schedule_in_database,
cron.unschedule by name or id). Pressing "run now" twice before the minute updates the same job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..config import Settings
from ..connector import Session
from ..exceptions import NotFound
from ..names import MAX_NAME_BYTES, cron_job_name
from ..queries import queries
from .pg_cron import CronJob, CronJobs
from .schedules import cron_command

MARK = "now:"
#: A one-off whose minute is this far past has run (or failed, or pg_cron was down): removed.
STALE = timedelta(minutes=2)


@dataclass(frozen=True)
class RunNow:
    """A run requested: the schedule, its one-off cron job and when pg_cron runs it."""

    schedule: str
    cron_job: str
    jobid: int
    runs_at: datetime
    audit_id: int


def oneoff_name(cron: CronJobs, job: CronJob) -> str:
    name = cron_job_name(cron.site.prefix, f"{MARK}{job.jobid}")
    assert len(name.encode()) <= MAX_NAME_BYTES  # the prefix fits a schedule name of 1+ characters
    return name


def run_now(session: Session, settings: Settings, cron: CronJobs, schedule: str, actor: str) -> RunNow:
    """Schedule the one-off run of ``schedule`` and audit it (``session``: jobkit's database)."""
    job = cron.find(schedule)
    if job is None:
        raise NotFound(f"no schedule {schedule!r}", hint="see `jobkit schedule list` or the schedules page")
    sweep(cron)
    name = oneoff_name(cron, job)
    command = job.command
    if job.database == cron.site.cron_database:
        command = cron_command(settings, cron.site, "unschedule_self", self_name=name) + "; " + command
    with cron.call() as s:
        when = s.one(cron.q["cron_next_minute"]) or {}
        jobid = int(s.scalar(cron.q["cron_schedule_in_database"], {
            "name": name, "schedule": when["expression"], "command": command, "database": job.database}))
    runs_at = when["runs_at"]
    audit_id = int(session.scalar(queries(settings.schema)["dash_audit_run_schedule"], {
        "actor": actor, "name": schedule, "cron_job": name, "runs_at": runs_at}))
    return RunNow(schedule, name, jobid, runs_at, audit_id)


def pending_in(every: list[CronJob], schedules: list[CronJob]) -> dict[str, CronJob]:
    """Of ``every`` cron job, the one-offs waiting to run, by the name of the schedule they run."""
    by_id = {j.jobid: j.name for j in schedules}
    found: dict[str, CronJob] = {}
    for job in every:
        if job.name.startswith(MARK) and job.last_start is None:
            ident = job.name[len(MARK):]
            if ident.isdigit() and int(ident) in by_id:
                found[by_id[int(ident)]] = job
    return found


def sweep(cron: CronJobs) -> int:
    """Unschedule the one-offs that have run, or whose minute is ``STALE`` past; how many."""
    oneoffs = [j for j in cron.every() if j.name.startswith(MARK)]
    if not oneoffs:
        return 0
    with cron.call() as s:
        local_now = s.scalar(cron.q["cron_local_now"])
    removed = 0
    for job in oneoffs:
        if job.last_start is not None or minute_passed(job.schedule, local_now):
            cron.delete(job)
            removed += 1
    return removed


def minute_passed(expression: str, local_now: datetime) -> bool:
    """Whether the one-off expression "M H D Mon *" lies more than STALE behind pg_cron's wall
    clock ``local_now`` (naive, in pg_cron's time zone). Anything else is not one of ours: True."""
    try:
        minute, hour, day, month = (int(f) for f in expression.split()[:4])
        at = local_now.replace(month=month, day=day, hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:
        return True
    if at > local_now + timedelta(days=1):  # December's one-off seen in January
        at = at.replace(year=at.year - 1)
    return at < local_now - STALE


__all__ = ["MARK", "RunNow", "minute_passed", "oneoff_name", "pending_in", "run_now", "sweep"]
