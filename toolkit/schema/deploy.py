"""`jobkit deploy`: check the server, take the deploy lock, apply pending migrations, sync settings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..config import Settings
from ..connector import Database, Session
from ..cron import schedules as scheduling
from ..exceptions import DeployError, DriftError, PrerequisiteError
from ..queries import queries
from . import functions, presquash, sync, triggers
from .locks import Retry
from .migrations import (
    Plan,
    applied_migrations,
    apply,
    apply_bridge,
    bridge_sql,
    finish_outside,
    plan,
    record_recut,
    rows,
    run_outside,
    unfinished_outside,
    unvalidated_constraints,
    validate_constraints,
)
from .render import (
    Migration,
    render_api,
    render_deploy_unit,
    render_functions,
    render_migrations,
    render_user_api,
)

Echo = Callable[[str], None]


@dataclass
class DeployReport:
    """What a deploy did (or, with dry_run, would do)."""

    applied: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    types_changed: list[str] = field(default_factory=list)
    settings_changed: list[str] = field(default_factory=list)
    schedules_changed: list[str] = field(default_factory=list)
    functions_changed: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # --check: what an interrupted deploy left
    triggers_changed: list[str] = field(default_factory=list)  # [triggers.<name>] (issue 24)
    notices: list[str] = field(default_factory=list)
    head: str | None = None
    sql: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.applied or self.types_changed or self.settings_changed or self.schedules_changed
                    or self.functions_changed or self.triggers_changed)


@dataclass(frozen=True)
class DeployOptions:
    dry_run: bool = False
    check: bool = False
    schedules: bool = True
    lock_wait: timedelta = timedelta(minutes=5)
    #: How long one statement may wait for a table lock (every enqueue and claim queues behind that
    #: wait): half of the 1 s stall budget of docs/BENCHMARKS.md "Live upgrade".
    lock_timeout: timedelta = timedelta(milliseconds=500)
    #: Tries of a unit whose lock wait ran out, the pause after the first (doubling, at most 8 s):
    #: 10 tries give another session about 45 s in all to let go (locks.Retry.budget).
    lock_attempts: int = 10
    lock_backoff: timedelta = timedelta(milliseconds=250)
    #: Rows per transaction of a migration's batched backfills (outside.py).
    backfill_batch: int = 1000
    extra_migrations: Sequence[Path] = ()
    #: Deploy only up to this migration version (the live-upgrade benchmark starts from 0001).
    up_to: str | None = None

    @property
    def retry(self) -> Retry:
        return Retry(attempts=self.lock_attempts, backoff=self.lock_backoff)


def deploy(
    db: Database, settings: Settings, options: DeployOptions = DeployOptions(), echo: Echo = print
) -> DeployReport:
    """Bring the database to this jobkit's head: migrations, then type settings, runtime settings and
    schedules. With ``check``, raise DriftError (exit 3) instead when anything differs."""
    local = [m for m in render_migrations(settings, options.extra_migrations)
             if options.up_to is None or m.version <= options.up_to]
    with db.session() as session:
        check_prerequisites(session, settings)
        applied = applied_migrations(session, settings)
        sync.check_ratelimit_names(session, settings, deployed=bool(applied))
        if options.schedules:
            scheduling.preflight(db, settings)  # before any migration: nothing half-applied
        planned = triggers.preflight(session, settings)  # tables, columns, grants, `when`: likewise
        with _deploy_lock(session, settings, options.lock_wait, echo):
            applied = applied_migrations(session, settings)
            if presquash.is_presquash(rows(applied)):
                layout = presquash.layout_of(rows(applied), settings.schema)
                if options.check or options.dry_run:
                    return _bridge_preview(settings, layout, local, options)
                report = _bridge(session, settings, layout, local, options)
                applied = applied_migrations(session, settings)
            else:
                report = DeployReport()
            the_plan = plan(local, applied)
            report.pending, report.head = [_label(m) for m in the_plan.pending], the_plan.head
            if options.check or options.dry_run:
                if not the_plan.pending and the_plan.head is not None:
                    report.functions_changed = functions.apply(
                        session, settings, lock_timeout=options.lock_timeout, keep=False).lines()
                    report.unfinished = (unfinished_outside(session, settings, local, the_plan.head)
                                         + unvalidated_constraints(session, settings))
                    _compare_data(db, session, settings, options, report, apply=False)
                    report.triggers_changed = triggers.drift(session, settings, planned)
                if options.check:
                    _raise_if_drift(the_plan, report)
                else:
                    _refuse_conflicts(the_plan)
                    units = [render_deploy_unit(settings, m) for m in the_plan.pending]
                    if the_plan.pending or report.functions_changed:
                        units.append(render_functions(settings))
                    report.sql = "\n".join(units)
                return report
            _refuse_conflicts(the_plan)
            timeout, retry, batch = options.lock_timeout, options.retry, options.backfill_batch
            finish_outside(session, settings, local, the_plan.head, lock_timeout=timeout, retry=retry,
                           batch=batch, echo=echo)
            for migration in the_plan.pending:
                report.notices += apply(session, settings, migration, lock_timeout=timeout, retry=retry,
                                        echo=echo)
                run_outside(session, settings, migration, lock_timeout=timeout, retry=retry, batch=batch,
                            echo=echo)
                report.applied.append(_label(migration))
                report.head = migration.version
            if the_plan.recut:
                record_recut(session, settings, the_plan.recut)
            changes = functions.apply(session, settings, lock_timeout=timeout, retry=retry, echo=echo)
            report.functions_changed, report.notices = changes.lines(), report.notices + changes.notices
            validate_constraints(session, settings, lock_timeout=timeout, retry=retry, echo=echo)
            _compare_data(db, session, settings, options, report, apply=True)
            report.triggers_changed = triggers.apply(session, settings, planned, lock_timeout=timeout,
                                                     retry=retry, echo=echo)
    return report


def _bridge(session: Session, settings: Settings, layout: presquash.Layout, local: Sequence[Migration],
            options: DeployOptions) -> DeployReport:
    """Upgrade a pre-squash deployment to 0001_baseline; the caller then applies the rest."""
    notices = apply_bridge(session, settings, layout, _baseline(local), lock_timeout=options.lock_timeout,
                           retry=options.retry)
    return DeployReport(applied=[f"upgrade bridge from {layout.label}"], notices=notices)


def _bridge_preview(settings: Settings, layout: presquash.Layout, local: Sequence[Migration],
                    options: DeployOptions) -> DeployReport:
    """deploy --check / --dry-run of a pre-squash deployment: what a plain deploy would do."""
    baseline = _baseline(local)
    rest = [m for m in local if m is not baseline]
    pending = [f"upgrade bridge from {layout.label}", *(_label(m) for m in rest)]
    if options.check:
        raise DriftError(
            "database drift: deployed by a jobkit from before its migrations were squashed "
            f"({layout.label}); `jobkit deploy` upgrades it: {', '.join(pending)}")
    units = [render_deploy_unit(settings, m) for m in rest]
    return DeployReport(pending=pending, sql="\n".join([bridge_sql(settings, layout, baseline), *units,
                                                        render_functions(settings)]))


def _baseline(local: Sequence[Migration]) -> Migration:
    """The migration a bridge ends at: this jobkit's 0001_baseline."""
    found = [m for m in local if (m.version, m.name) == ("0001", "baseline")]
    if not found:
        raise DeployError("this jobkit has no 0001_baseline migration to upgrade a pre-squash deployment to",
                          hint="reinstall jobkit (pip install --force-reinstall jobkit-pg)")
    return found[0]


def _compare_data(db: Database, session: Session, settings: Settings, options: DeployOptions,
                  report: DeployReport, *, apply: bool) -> None:
    types = sync.type_diff(session, settings)
    runtime = sync.runtime_diff(session, settings)
    limits = sync.ratelimit_diff(session, settings)
    events = sync.event_diff(session, settings)
    report.types_changed = sorted(types)
    report.settings_changed = (sync.describe(runtime) + [f"ratelimit {k}" for k in sorted(limits)]
                               + [f"event {k}" for k in sorted(events)])
    if apply:
        sync.apply_types(session, settings, types)
        sync.apply_runtime(session, settings, runtime)
        sync.apply_ratelimits(session, settings, limits)
        sync.apply_events(session, settings, events)
    report.settings_changed += sync.payload_index(session, settings, apply=apply)
    report.settings_changed += sync.created_index(session, settings, apply=apply)
    api = render_api(settings)
    changed = sync.api_changes(session, settings, api, apply=apply) if api else []
    if changed:
        report.settings_changed.append(f"[api] schema {settings.api_schema}: " + ", ".join(changed))
    user_api = render_user_api(settings)
    if user_api and settings.user_api:
        changed = sync.api_changes(session, settings, user_api, apply=apply, schema=settings.user_api.schema,
                                   catalog="user_api_catalog")
        if changed:
            report.settings_changed.append(
                f"[user_api] schema {settings.user_api.schema}: " + ", ".join(changed))
    if options.schedules:
        report.schedules_changed = scheduling.sync(db, settings, apply=apply).lines()


def check_prerequisites(session: Session, settings: Settings) -> dict[str, Any]:
    """Fail early, with the fix, when the server cannot host jobkit."""
    info = session.one(queries(settings.schema)["server_info"], {"schema": settings.schema}) or {}
    if not info.get("cron_available"):
        raise PrerequisiteError(
            "pg_cron is not installed on this server",
            hint="on Supabase enable the Cron integration; on Debian apt-get install postgresql-15-cron",
        )
    if info.get("can_read_settings") and info.get("cron_database") is None:
        raise PrerequisiteError(
            "pg_cron is installed but not loaded (shared_preload_libraries lacks pg_cron)",
            hint="add pg_cron to shared_preload_libraries, set cron.database_name, restart PostgreSQL "
            "(on Supabase: enable the Cron integration)",
        )
    owner = info.get("schema_owner")
    if owner is None and not info.get("can_create"):
        raise PrerequisiteError(
            f"role {info.get('user_name')} cannot create schemas in database {info.get('database')}",
            hint="connect as the database owner (on Supabase: postgres) or GRANT CREATE ON DATABASE",
        )
    if owner is not None and owner != info.get("user_name") and not info.get("is_superuser"):
        raise PrerequisiteError(
            f"schema {settings.schema} is owned by {owner}, not by {info.get('user_name')}",
            hint=f"connect as {owner}, the role that deployed jobkit",
        )
    return info


def _refuse_conflicts(the_plan: Plan) -> None:
    if the_plan.unknown:
        versions = ", ".join(a.version for a in the_plan.unknown)
        raise DeployError(
            f"the database has jobkit migrations this version does not know ({versions})",
            hint="upgrade jobkit (pip install -U jobkit-pg) to the version that deployed them",
        )
    if the_plan.changed:
        applied, local = the_plan.changed[0]
        raise DriftError(
            f"migration {applied.version}_{applied.name} was applied with a different checksum "
            f"({applied.checksum[:12]} in the database, {local.checksum[:12]} here)",
            hint="deploy with the same jobkit version and schema setting that applied it",
        )


def _raise_if_drift(the_plan: Plan, report: DeployReport) -> None:
    problems = []
    if the_plan.pending:
        problems.append(f"{len(the_plan.pending)} pending migration(s): {', '.join(report.pending)}")
    if the_plan.recut:
        problems.append("migrations recut by issue 22 are recorded with their old checksums: "
                        + ", ".join(m.version for m in the_plan.recut))
    if report.functions_changed:
        problems.append("sql/functions/ differs: " + ", ".join(report.functions_changed))
    if report.unfinished:
        problems.append("an interrupted deploy left work undone: " + ", ".join(report.unfinished))
    for applied, local in the_plan.changed:
        problems.append(
            f"migration {applied.version}_{applied.name} was applied with checksum "
            f"{applied.checksum[:12]}, this jobkit has {local.checksum[:12]}"
        )
    if the_plan.unknown:
        problems.append(
            "the database has migrations this jobkit does not know: "
            + ", ".join(a.version for a in the_plan.unknown)
        )
    if report.types_changed:
        problems.append("job type settings differ from jobkit.toml: " + ", ".join(report.types_changed))
    if report.settings_changed:
        problems.append("runtime settings differ: " + ", ".join(report.settings_changed))
    if report.schedules_changed:
        problems.append("schedules differ: " + "; ".join(report.schedules_changed))
    if report.triggers_changed:
        problems.append("row triggers differ: " + "; ".join(report.triggers_changed))
    if problems:
        raise DriftError("database drift: " + "; ".join(problems))


@contextmanager
def _deploy_lock(session: Session, settings: Settings, wait: timedelta, echo: Echo) -> Iterator[None]:
    """Hold jobkit's deploy lock (a session-level advisory lock): taken at once when free, else tried
    again every 50-500 ms for (at most) ``wait``. Not queued inside PostgreSQL: a statement blocked
    on the lock holds a snapshot, and the holder's CREATE INDEX CONCURRENTLY waits for every older
    snapshot to go, so the two deploys would deadlock."""
    q = queries(settings.schema)
    key = {"key": f"jobkit:deploy:{settings.schema}"}
    if not session.scalar(q["deploy_try_lock"], key):
        echo("waiting for another jobkit deploy to finish...")
        deadline, pause = time.monotonic() + wait.total_seconds(), 0.05
        while not session.scalar(q["deploy_try_lock"], key):
            if time.monotonic() >= deadline:
                raise DeployError(
                    "another jobkit deploy held the deploy lock for too long",
                    hint="wait for it to finish (see pg_stat_activity) and run `jobkit deploy` again",
                )
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)
    try:
        yield
    finally:
        session.scalar(q["deploy_unlock"], key)


def _label(migration: Any) -> str:
    return f"{migration.version}_{migration.name}"
