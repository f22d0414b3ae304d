"""What jobkit schedules and why: the built-in and declared schedules, and the operator's verbs.

``jobkit deploy`` syncs the schedules declared in jobkit.toml plus the built-in ones (wake-up,
sweeps, pruning) and removes the ones it created that are no longer declared; schedules added with
``jobkit schedule add`` are left alone. A paused job stays paused through a sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..config import Settings
from ..connector import Database
from ..exceptions import ConfigError, InvalidState, NotFound
from ..queries import parse
from ..schema.render import environment, ident
from ..validate import type_name
from .pg_cron import CronJob, CronJobs, CronSite, Desired, check_name, origins, set_origin
from .spec import next_run


@dataclass
class ScheduleDiff:
    """What a sync changes: create, update, delete."""

    create: list[Desired] = field(default_factory=list)
    update: list[tuple[CronJob, Desired]] = field(default_factory=list)
    delete: list[CronJob] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.create or self.update or self.delete)

    def lines(self) -> list[str]:
        return ([f"+ schedule {d.name} ({d.schedule}): {d.target}" for d in self.create]
                + [f"~ schedule {d.name} ({j.schedule} -> {d.schedule}): {d.target}" for j, d in self.update]
                + [f"- schedule {j.name} ({j.schedule})" for j in self.delete])


@dataclass(frozen=True)
class ScheduleRow:
    """A line of `jobkit schedule list`."""

    name: str
    schedule: str
    target: str
    active: bool
    origin: str
    last_start: datetime | None
    last_status: str | None
    next_run: datetime | None


def cron_command(settings: Settings, site: CronSite, name: str, **context: str) -> str:
    """Render one of sql/cron_commands.sql for this installation."""
    text = environment().get_template("cron_commands.sql").render(
        s=ident(settings.schema), schema=settings.schema,
        retention=f"{int(settings.retention.total_seconds())} seconds",
        prefix_like=_like_prefix(site.prefix), database=site.jobkit_database,
        type=context.get("type", ""), self_name=context.get("self_name", ""),
    )
    return dict(parse(text, "cron_commands.sql"))[name.replace("-", "_")]


def desired(settings: Settings, site: CronSite) -> list[Desired]:
    """The built-in schedules (minus those turned off) and the ones declared in jobkit.toml."""
    wanted = [
        Desired(name, schedule, cron_command(settings, site, name), f"built-in: {name}",
                site.cron_database if name == "prune-cron-history" else site.jobkit_database)
        for name, schedule in settings.maintenance.items() if schedule is not None
    ]
    for name, cfg in settings.schedules.items():
        wanted.append(_declared(settings, site, name, cfg.schedule, cfg.type, cfg.sql))
    return wanted


def plan_sync(wanted: list[Desired], existing: list[CronJob], known: dict[str, str]) -> ScheduleDiff:
    """Pure: the changes that make cron.job match ``wanted``."""
    by_name = {j.name: j for j in existing}
    diff = ScheduleDiff()
    for want in wanted:
        job = by_name.get(want.name)
        if job is None:
            diff.create.append(want)
        elif (job.schedule, job.command, job.database) != (want.schedule, want.command, want.database):
            diff.update.append((job, want))
    names = {w.name for w in wanted}
    diff.delete = [j for j in existing if j.name not in names and known.get(j.name) == "config"]
    return diff


def preflight(db: Database, settings: Settings) -> None:
    """What the schedule sync would refuse, checked before deploy changes anything: pg_cron created,
    every schedule valid for this pg_cron's version, every cron job name within pg_cron's limit."""
    jobs = CronJobs(db, settings)
    for want in desired(settings, jobs.site):
        jobs.check(want)


def sync(db: Database, settings: Settings, *, apply: bool = True) -> ScheduleDiff:
    """Plan (and unless ``apply`` is False, carry out) the schedule sync for deploy."""
    jobs = CronJobs(db, settings)
    with db.session() as session:
        diff = plan_sync(desired(settings, jobs.site), jobs.list(), origins(session, settings))
        if not apply:
            return diff
        for want in diff.create:
            jobs.create(want)
            set_origin(session, settings, want.name, "config")
        for job, want in diff.update:
            jobs.update(job, want)
            set_origin(session, settings, want.name, "config")
        for job in diff.delete:
            jobs.delete(job)
            set_origin(session, settings, job.name, None)
    return diff


def add(db: Database, settings: Settings, name: str, schedule: str, *,
        job_type: str | None = None, sql: str | None = None) -> Desired:
    """`jobkit schedule add`: create or replace an operator schedule."""
    check_name(name)
    if name in settings.schedules or name in settings.maintenance:
        raise ConfigError(f"schedule {name} is declared in jobkit.toml",
                          hint="change it there and run `jobkit deploy`")
    jobs = CronJobs(db, settings)
    want = _declared(settings, jobs.site, name, schedule, job_type, sql)
    job = jobs.find(name)
    if job is None:
        jobs.create(want)
    else:
        jobs.update(job, want)
    with db.session() as session:
        set_origin(session, settings, name, "cli")
    return want


#: What stops working while a built-in schedule is gone.
BUILT_IN_DUTIES = {
    "wake": "jobs whose wake-up was lost are no longer picked up by the minute wake-up",
    "sweep-stuck": "jobs of crashed workers (expired leases) are no longer reset, nor due retries woken",
    "sweep-dead": "jobs out of attempts are no longer moved to dead",
    "prune": "finished jobs, attempts and wake-up records are no longer pruned: the tables grow",
    "prune-cron-history": "cron.job_run_details is no longer pruned of jobkit's runs",
}


def remove(db: Database, settings: Settings, name: str, *, force: bool = False) -> str | None:
    """`jobkit schedule remove`. A built-in schedule only with ``force``; then returns the warning
    (what stops working, and that the next deploy re-creates it). A schedule declared in
    jobkit.toml (or made by deploy from it) is refused: the next deploy would re-create it, and
    until then ``deploy --check`` reports drift."""
    jobs = CronJobs(db, settings)
    _refuse_declared(db, settings, check_name(name))
    job = _existing(jobs, name)
    warning = None
    if name in BUILT_IN_DUTIES:
        warning = (f"{name} is built in: {BUILT_IN_DUTIES[name]}; the next `jobkit deploy` re-creates it "
                   f"(to keep it off: [maintenance] {name} = \"off\" in jobkit.toml)")
        if not force:
            raise InvalidState(f"schedule {name} is built in: {BUILT_IN_DUTIES[name]} without it",
                               hint=f"`jobkit schedule pause {name}` stops it for now; --force removes it; "
                               f"[maintenance] {name} = \"off\" turns it off for good")
    jobs.delete(job)
    with db.session() as session:
        set_origin(session, settings, name, None)
    return warning


def _refuse_declared(db: Database, settings: Settings, name: str) -> None:
    if name in BUILT_IN_DUTIES:
        return  # the built-in ones: see remove()
    if name not in settings.schedules:
        with db.session() as session:
            if origins(session, settings).get(name) != "config":
                return
    raise InvalidState(f"schedule {name} is declared in jobkit.toml: `jobkit deploy` keeps it",
                       hint=f"delete [schedules.{name}] from jobkit.toml and run `jobkit deploy` "
                       f"(`jobkit schedule pause {name}` stops it for now)")


def set_active(db: Database, settings: Settings, name: str, active: bool) -> CronJob:
    jobs = CronJobs(db, settings)
    job = _existing(jobs, name)
    jobs.set_active(job, active)
    return job


def rows(db: Database, settings: Settings, jobs: CronJobs | None = None,
         listed: list[CronJob] | None = None) -> list[ScheduleRow]:
    """A row per jobkit cron job; ``listed``: the jobs when the caller has read them already."""
    listed = (jobs or CronJobs(db, settings)).list() if listed is None else listed
    with db.session() as session:
        known = origins(session, settings)
    now = datetime.now(UTC)
    return [
        ScheduleRow(j.name, j.schedule, _target(settings, j), j.active, known.get(j.name, "unknown"),
                    j.last_start, j.last_status, next_run(j.schedule, now) if j.active else None)
        for j in listed
    ]


def _declared(settings: Settings, site: CronSite, name: str, schedule: str,
              job_type: str | None, sql: str | None) -> Desired:
    if (job_type is None) == (sql is None):
        raise ConfigError(f"schedule {name} needs exactly one target",
                          hint="--type T wakes the worker for a job type; --sql 'SELECT ...' runs SQL")
    if job_type is not None:
        type_name(job_type)
        return Desired(name, schedule, cron_command(settings, site, "wake_type", type=job_type),
                       f"wake {job_type}", site.jobkit_database)
    assert sql is not None
    if not sql.strip():
        raise ConfigError(f"schedule {name}: --sql is empty",
                          hint="give the statement to run, e.g. --sql 'select 1'")
    return Desired(name, schedule, sql.strip(), "sql", site.jobkit_database)


def _existing(jobs: CronJobs, name: str) -> CronJob:
    job = jobs.find(check_name(name))
    if job is None:
        raise NotFound(f"no jobkit schedule named {name}", hint="see `jobkit schedule list`")
    return job


def _target(settings: Settings, job: CronJob) -> str:
    wake_prefix = f"select {ident(settings.schema)}.wake('"
    if job.command.startswith(wake_prefix) and job.command.endswith("')"):
        return "wake " + job.command[len(wake_prefix):-2].replace("''", "'")
    if job.name in settings.maintenance:
        return f"built-in: {job.name}"
    return "sql: " + " ".join(job.command.split())[:60]


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
