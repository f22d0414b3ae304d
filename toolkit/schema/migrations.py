"""Versioned migrations: what is applied, what is pending, and applying one atomically.

:func:`plan` is a pure diff of the packaged migrations against the database's history table. Each
migration is applied in its own transaction together with its history row, so a failure leaves
nothing of it behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from ..config import Settings
from ..connector import Session
from ..durations import format_duration
from ..exceptions import DatabaseError, DeployError, NotDeployed
from ..queries import queries
from . import presquash
from .render import Migration, render_bridge, render_migrations, render_record, render_unit


@dataclass(frozen=True)
class Applied:
    """A history row."""

    version: str
    name: str
    checksum: str


@dataclass(frozen=True)
class Plan:
    """The difference between the local migrations and the database."""

    pending: list[Migration] = field(default_factory=list)
    changed: list[tuple[Applied, Migration]] = field(default_factory=list)
    unknown: list[Applied] = field(default_factory=list)
    head: str | None = None

    @property
    def up_to_date(self) -> bool:
        return not (self.pending or self.changed)


def plan(local: Sequence[Migration], applied: Sequence[Applied]) -> Plan:
    """Which local migrations are pending, which applied ones changed, which the database has extra."""
    by_version = {a.version: a for a in applied}
    known = {m.version for m in local}
    pending = [m for m in local if m.version not in by_version]
    changed = [
        (by_version[m.version], m)
        for m in local
        if m.version in by_version and by_version[m.version].checksum != m.checksum
    ]
    unknown = [a for a in applied if a.version not in known]
    head = max(by_version) if by_version else None
    return Plan(pending=pending, changed=changed, unknown=unknown, head=head)


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
    session: Session, settings: Settings, migration: Migration, *, lock_timeout: timedelta
) -> list[str]:
    """Apply one migration and record it, in one transaction. Returns the server's notices."""
    q = queries(settings.schema)
    session.notices.clear()
    try:
        with session.transaction():
            session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
            session.script(render_unit(settings, migration))
    except DatabaseError as exc:
        raise DeployError(
            f"migration {migration.version}_{migration.name} failed and was rolled back: {exc.message}",
            hint=_deploy_hint(exc, lock_timeout),
        ) from exc
    return [n for n in session.notices if n.startswith("jobkit:")]


def rows(applied: Sequence[Applied]) -> list[presquash.Row]:
    return [(a.version, a.name, a.checksum) for a in applied]


def bridge_sql(settings: Settings, layout: presquash.Layout, baseline: Migration) -> str:
    """The upgrade bridge from a pre-squash layout, as one script: its steps, then the history rows
    rewritten (the old rows deleted, 0001_baseline's recorded with this jobkit's checksum)."""
    steps = [render_bridge(settings, step) for step in layout.steps or ()]
    return "\n".join([*steps, render_bridge(settings, "history"), render_record(settings, baseline)])


def apply_bridge(session: Session, settings: Settings, layout: presquash.Layout, baseline: Migration,
                 *, lock_timeout: timedelta) -> list[str]:
    """Bring a pre-squash deployment to 0001_baseline in one transaction, then validate the
    constraints it added NOT VALID in a second one. Returns the server's notices."""
    q = queries(settings.schema)
    session.notices.clear()
    label = f"the upgrade bridge from {layout.label}"
    try:
        with session.transaction():
            session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
            session.script(bridge_sql(settings, layout, baseline))
    except DatabaseError as exc:
        raise DeployError(f"{label} failed and was rolled back: {exc.message}",
                          hint=_deploy_hint(exc, lock_timeout)) from exc
    notices = [n for n in session.notices if n.startswith("jobkit:")]
    validate_constraints(session, settings, lock_timeout=lock_timeout)
    return notices


def validate_constraints(session: Session, settings: Settings, *, lock_timeout: timedelta) -> list[str]:
    """Validate every constraint of jobkit's tables that a migration (or the upgrade bridge) added
    NOT VALID, each in a transaction of its own: VALIDATE takes SHARE UPDATE EXCLUSIVE, so enqueues,
    claims and completions go on while the rows are checked. Returns the constraints validated."""
    q = queries(settings.schema)
    done: list[str] = []
    for row in session.all(q["unvalidated_constraints"], {"schema": settings.schema}):
        try:
            with session.transaction():
                session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
                session.execute_with_identifiers("alter table {schema}.{table} validate constraint {name}",
                                                 schema=settings.schema, table=row["table"], name=row["name"])
        except DatabaseError as exc:
            raise DeployError(
                f"validating constraint {row['name']} of {row['table_name']} failed: {exc.message}",
                hint="the migrations themselves are committed; run `jobkit deploy` again to validate it",
            ) from exc
        done.append(row["name"])
    return done


def _deploy_hint(exc: DatabaseError, lock_timeout: timedelta) -> str:
    if "lock timeout" in exc.message:
        return (
            f"another session held a lock for more than {format_duration(lock_timeout)}; "
            "retry when the database is quieter"
        )
    return exc.hint or "nothing was changed; fix the cause above and run `jobkit deploy` again"


def milliseconds(value: timedelta) -> str:
    return f"{int(value.total_seconds() * 1000)}ms"
