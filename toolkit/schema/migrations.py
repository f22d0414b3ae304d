"""Versioned migrations: what is applied, what is pending, and applying one atomically.

:func:`plan` is a pure diff of the packaged migrations against the database's history table. Each
migration is applied in its own transaction together with its history row, so a failure leaves
nothing of it behind.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from ..config import Settings
from ..connector import Session
from ..exceptions import DatabaseError, DeployError, NotDeployed
from ..queries import queries
from . import outside, presquash
from .locks import Retry, gave_up_hint, lock_conflict, retrying
from .render import Migration, render_bridge, render_migrations, render_record, render_unit

Echo = Callable[[str], None]
#: A batched backfill's rows per transaction, unless deploy says otherwise (DeployOptions.backfill_batch).
BACKFILL_BATCH = 1000
#: No retry: what direct callers of apply() get unless they pass deploy's policy.
ONCE = Retry()


@dataclass(frozen=True)
class Applied:
    """A history row."""

    version: str
    name: str
    checksum: str


# Migrations 0001..0013 were recut by issue 22: their functions, views, triggers and grants moved to
# sql/functions/ (applied by every deploy), leaving the tables, indexes, constraints and data moves
# they had, unchanged. A database that applied them before records their old checksums: deploy
# records the recut ones instead (what they build is the same) rather than calling it drift.
RECUT_THROUGH = "0013"


@dataclass(frozen=True)
class Plan:
    """The difference between the local migrations and the database."""

    pending: list[Migration] = field(default_factory=list)
    changed: list[tuple[Applied, Migration]] = field(default_factory=list)
    unknown: list[Applied] = field(default_factory=list)
    recut: list[Migration] = field(default_factory=list)
    head: str | None = None

    @property
    def up_to_date(self) -> bool:
        return not (self.pending or self.changed or self.recut)


def plan(local: Sequence[Migration], applied: Sequence[Applied]) -> Plan:
    """Which local migrations are pending, which applied ones changed, which the database has extra."""
    by_version = {a.version: a for a in applied}
    known = {m.version for m in local}
    pending = [m for m in local if m.version not in by_version]
    differs = [m for m in local if m.version in by_version and by_version[m.version].checksum != m.checksum]
    recut = [m for m in differs if m.version <= RECUT_THROUGH and by_version[m.version].name == m.name]
    changed = [(by_version[m.version], m) for m in differs if m not in recut]
    unknown = [a for a in applied if a.version not in known]
    head = max(by_version) if by_version else None
    return Plan(pending=pending, changed=changed, unknown=unknown, recut=recut, head=head)


def record_recut(session: Session, settings: Settings, recut: Sequence[Migration]) -> None:
    """Record the recut migrations' checksums (their tables are what the database has)."""
    q = queries(settings.schema)
    with session.transaction():
        for migration in recut:
            session.execute(q["migration_checksum_update"],
                            {"version": migration.version, "checksum": migration.checksum})


def applied_migrations(session: Session, settings: Settings) -> list[Applied]:
    """The history table's rows; none when jobkit was never deployed here."""
    q = queries(settings.schema)
    table = f"{settings.schema}.schema_migrations"
    if not session.scalar(q["migration_table_exists"], {"table": table}):
        return []
    return [
        Applied(r["version"], r["name"], r["checksum"])
        for r in session.all(q["applied_migrations"])
    ]


def require_deployed(session: Session, settings: Settings, where: str) -> None:
    """Raise NotDeployed unless jobkit's schema is in this database at this jobkit's head (a command
    run before `jobkit deploy`, or after an upgrade without one, says so instead of a raw SQL error)."""
    applied = applied_migrations(session, settings)
    if not applied:
        raise NotDeployed(
            f"jobkit is not deployed in {where} (no schema {settings.schema}): run `jobkit deploy`", hint=""
        )
    if presquash.is_presquash(rows(applied)):
        raise NotDeployed(presquash.message(where), hint="")
    the_plan = plan(render_migrations(settings), applied)
    if the_plan.pending:
        raise NotDeployed(
            f"jobkit's schema in {where} is at {the_plan.head}; this jobkit needs "
            f"{the_plan.pending[-1].version}: run `jobkit deploy`",
            hint="",
        )
    if the_plan.unknown:
        raise NotDeployed(
            f"jobkit's schema in {where} is at {applied[-1].version}, newer than this jobkit "
            f"({the_plan.head})",
            hint="upgrade jobkit to the version that deployed it (pip install -U jobkit-pg)",
        )


def apply(
    session: Session, settings: Settings, migration: Migration, *, lock_timeout: timedelta,
    retry: Retry = ONCE, echo: Echo | None = None,
) -> list[str]:
    """Apply one migration (up to its outside-transaction marker) and record it, in one transaction;
    on a lock conflict roll back and try again (``retry``). Returns the server's notices."""
    q = queries(settings.schema)
    label = f"migration {migration.version}_{migration.name}"

    def once() -> None:
        session.notices.clear()
        with session.transaction():
            session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
            session.script(render_unit(settings, migration))

    try:
        retrying(label, retry, lock_timeout, once, echo)
    except DatabaseError as exc:
        raise DeployError(f"{label} failed and was rolled back: {exc.message}",
                          hint=_deploy_hint(exc, lock_timeout, retry)) from exc
    return [n for n in session.notices if n.startswith("jobkit:")]


def run_outside(
    session: Session, settings: Settings, migration: Migration, *, lock_timeout: timedelta,
    retry: Retry = ONCE, batch: int = BACKFILL_BATCH, echo: Echo | None = None,
) -> list[str]:
    """Run ``migration``'s outside-transaction steps (outside.py) one by one in autocommit, after the
    migration's own transaction committed. Each is idempotent: a run after a crash finishes the job.
    Returns what each step did."""
    label = f"migration {migration.version}_{migration.name}"
    _, steps = outside.split(migration.sql, label)
    if not steps:
        return []
    q = queries(settings.schema)
    done: list[str] = []
    session.execute(q["set_session_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
    try:
        for step in steps:
            what = f"{label}: {step.describe()}"
            try:
                done.append(retrying(what, retry, lock_timeout,
                                     functools.partial(_outside_step, session, settings, step, batch), echo))
            except DatabaseError as exc:
                hint = (gave_up_hint(lock_timeout, retry) + "; " if lock_conflict(exc) else "") + (
                    "the migration itself is committed: `jobkit deploy` runs its outside-transaction "
                    "statements again and finishes them")
                raise DeployError(f"{what} failed outside the migration's transaction: {exc.message}",
                                  hint=hint) from exc
    finally:
        session.execute(q["reset_lock_timeout"])
    return done


def _outside_step(session: Session, settings: Settings, step: outside.Step, batch: int) -> str:
    q = queries(settings.schema)
    if step.kind == "create_index" and step.index is not None:
        if session.scalar(q["index_invalid"], {"schema": settings.schema, "name": step.index}):
            session.execute_with_identifiers("drop index concurrently if exists {schema}.{name}",
                                             schema=settings.schema, name=step.index)
        session.execute(step.sql)  # one statement (search_path pinned by run_outside)
        return step.describe()
    if step.kind != "backfill":
        session.execute(step.sql)
        return step.describe()
    total = 0
    while touched := session.execute_count(step.sql, {"batch": batch}):
        total += touched
    return f"{step.describe()} ({total} rows)"


def finish_outside(
    session: Session, settings: Settings, local: Sequence[Migration], head: str | None, *,
    lock_timeout: timedelta, retry: Retry = ONCE, batch: int = BACKFILL_BATCH, echo: Echo | None = None,
) -> list[str]:
    """Run the outside-transaction steps of the migration at ``head`` (the newest applied) again.

    Deploy runs a migration's steps before it applies the next migration, so only the newest applied
    one can have unfinished steps (a deploy killed between the phases). Older ones are not run again:
    a later migration may have dropped what they built (0011 drops 0007's jobs_owner_idx)."""
    found = [m for m in local if m.version == head]
    if not found:
        return []
    return run_outside(session, settings, found[0], lock_timeout=lock_timeout, retry=retry, batch=batch,
                       echo=echo)


def unfinished_outside(session: Session, settings: Settings, local: Sequence[Migration],
                       head: str | None) -> list[str]:
    """What the head migration's outside-transaction steps have not done yet (a deploy killed between
    the phases; the next deploy finishes it), for `deploy --check`: an index missing or INVALID, a
    backfill with rows left (tried on one row in a transaction that is rolled back)."""
    found = [m for m in local if m.version == head]
    if not found:
        return []
    label = f"{found[0].version}_{found[0].name}"
    q = queries(settings.schema)
    left = []
    for step in outside.split(found[0].sql, f"migration {label}")[1]:
        if step.kind == "create_index" and step.index is not None:
            valid = session.scalar(q["index_valid"], {"schema": settings.schema, "name": step.index})
            if valid is not True:
                left.append(f"{label}: {step.describe()} {'not built' if valid is None else 'INVALID'}")
        elif step.kind == "backfill" and _rows_left(session, settings, step.sql):
            left.append(f"{label}: {step.describe()} has rows left")
    return left


class _Trial(Exception):
    """Raised to roll a trial transaction back."""


def _rows_left(session: Session, settings: Settings, sql: str) -> bool:
    q, touched = queries(settings.schema), 0
    try:
        with session.transaction():
            session.execute(q["set_local_lock_timeout"], {"timeout": "500ms"})  # a busy row: do not wait
            touched = session.execute_count(sql, {"batch": 1})
            raise _Trial
    except _Trial:
        pass
    except DatabaseError as exc:
        if not lock_conflict(exc):
            raise
        return True  # a row it would touch is locked: it has not been done
    return touched > 0


def unvalidated_constraints(session: Session, settings: Settings) -> list[str]:
    """Constraints added NOT VALID that deploy has not validated yet (an interrupted deploy)."""
    q = queries(settings.schema)
    return [f"constraint {r['name']} on {r['table']} not validated yet"
            for r in session.all(q["unvalidated_constraints"], {"schema": settings.schema})]


def rows(applied: Sequence[Applied]) -> list[presquash.Row]:
    return [(a.version, a.name, a.checksum) for a in applied]


def bridge_sql(settings: Settings, layout: presquash.Layout, baseline: Migration) -> str:
    """The upgrade bridge from a pre-squash layout, as one script: its steps, then the history rows
    rewritten (the old rows deleted, 0001_baseline's recorded with this jobkit's checksum)."""
    steps = [render_bridge(settings, step) for step in layout.steps or ()]
    return "\n".join([*steps, render_bridge(settings, "history"), render_record(settings, baseline)])


def apply_bridge(session: Session, settings: Settings, layout: presquash.Layout, baseline: Migration,
                 *, lock_timeout: timedelta, retry: Retry = ONCE, echo: Echo | None = None) -> list[str]:
    """Bring a pre-squash deployment to 0001_baseline in one transaction, then validate the
    constraints it added NOT VALID in a second one. Returns the server's notices."""
    q = queries(settings.schema)
    label = f"the upgrade bridge from {layout.label}"

    def once() -> None:
        session.notices.clear()
        with session.transaction():
            session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
            session.script(bridge_sql(settings, layout, baseline))

    try:
        retrying(label, retry, lock_timeout, once, echo)
    except DatabaseError as exc:
        raise DeployError(f"{label} failed and was rolled back: {exc.message}",
                          hint=_deploy_hint(exc, lock_timeout, retry)) from exc
    notices = [n for n in session.notices if n.startswith("jobkit:")]
    validate_constraints(session, settings, lock_timeout=lock_timeout, retry=retry, echo=echo)
    return notices


def validate_constraints(session: Session, settings: Settings, *, lock_timeout: timedelta,
                         retry: Retry = ONCE, echo: Echo | None = None) -> list[str]:
    """Validate every constraint of jobkit's tables that a migration (or the upgrade bridge) added
    NOT VALID, each in a transaction of its own: VALIDATE takes SHARE UPDATE EXCLUSIVE, so enqueues,
    claims and completions go on while the rows are checked. Returns the constraints validated."""
    q = queries(settings.schema)
    done: list[str] = []
    for row in session.all(q["unvalidated_constraints"], {"schema": settings.schema}):

        def once(row: dict[str, str] = row) -> None:
            with session.transaction():
                session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
                session.execute_with_identifiers("alter table {schema}.{table} validate constraint {name}",
                                                 schema=settings.schema, table=row["table"], name=row["name"])

        try:
            retrying(f"validating {row['name']}", retry, lock_timeout, once, echo)
        except DatabaseError as exc:
            hint = (gave_up_hint(lock_timeout, retry) + "; " if lock_conflict(exc) else "") + (
                "the migrations themselves are committed; run `jobkit deploy` again to validate it")
            raise DeployError(
                f"validating constraint {row['name']} of {row['table_name']} failed: {exc.message}",
                hint=hint,
            ) from exc
        done.append(row["name"])
    return done


def _deploy_hint(exc: DatabaseError, lock_timeout: timedelta, retry: Retry) -> str:
    if lock_conflict(exc):
        return "nothing of it was applied; " + gave_up_hint(lock_timeout, retry)
    return exc.hint or "nothing was changed; fix the cause above and run `jobkit deploy` again"


def milliseconds(value: timedelta) -> str:
    return f"{int(value.total_seconds() * 1000)}ms"
