"""Declared row triggers (``[triggers.<name>]``, issue 24): checked, deployed, compared.

Per trigger and operation, deploy makes a function in jobkit's schema (``rowtrigger_<name>_<op>``,
SECURITY DEFINER, owned by the deploying role, search_path pinned) and a statement-level AFTER
trigger on the table (``<jobkit schema>_<name>_<op>``) whose transition tables feed one insert into
jobs per statement (sql/row_trigger.sql). What it manages is listed in ``jobkit.row_triggers``, with
the sha256 of the SQL it ran and the md5 of the definitions it left: deploy adds, changes and
removes only those, and ``deploy --check`` reports one dropped, disabled or altered by hand.

Everything that can be refused is refused before anything is applied (:func:`preflight`): a missing
table or column, a table without a primary key, no TRIGGER privilege, a ``when`` that does not
compile (tried in a transaction that is rolled back), a managed trigger to remove from a table the
role does not own (only the owner may drop a trigger). A change of ``when``, payload or type replaces
the function only: the trigger, and its table, are left alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..config import Settings
from ..connector import Session, json_param
from ..exceptions import DatabaseError, DeployError
from ..queries import queries
from ..triggerspec import BODY_TAG, TriggerConfig, triggers_of
from .locks import Echo, Retry, gave_up_hint, lock_conflict, retrying
from .migrations import milliseconds
from .render import environment, ident


@dataclass(frozen=True)
class Table:
    """A trigger's table as the deploying role sees it (query trigger_table)."""

    regclass: str
    owner: str
    owned: bool
    columns: dict[str, str]
    pk: tuple[str, ...]


@dataclass(frozen=True)
class Planned:
    """One managed trigger (a declared trigger's operation) as deploy would make it."""

    config: TriggerConfig
    op: str
    table: Table
    function_sql: str
    trigger_sql: str
    checksum: str

    @property
    def key(self) -> tuple[str, str]:
        return self.config.name, self.op

    def label(self) -> str:
        return f"trigger {self.config.name} ({self.op} on {self.config.qualified})"


def render(settings: Settings, config: TriggerConfig, op: str, table: Table | None, part: str) -> str:
    """One part of sql/row_trigger.sql: "function", "trigger", or "trial" (the function's select
    over typed nulls shaped like the table). Without ``table`` (`jobkit render`) the primary key and
    the columns are left as tokens for sql/row_triggers_apply.sql to fill in (trigger_script.py)."""
    context = {
        "s": ident(settings.schema), "schema": settings.schema, "part": part, "op": op,
        "trigger": config.trigger_name(settings.schema, op), "table_schema": config.schema,
        "table_name": config.table,
        "name": config.name, "fn": config.function_name(op), "tag": BODY_TAG, "type": config.type,
        "table_label": config.qualified, "when": config.when,
        "idempotency": config.idempotency, "emit": config.emit, "key": config.key,
        "payload": config.payload, "pk": list(table.pk) if table else None,
        "columns": sorted(table.columns.items()) if table else None,
    }
    return environment().get_template("row_trigger.sql").render(context)


def preflight(session: Session, settings: Settings) -> list[Planned]:
    """Check every declared trigger against the database and plan it; refuse (one line, naming the
    trigger and the fix) anything deploy could not apply whole."""
    planned = [_plan(session, settings, config, op)
               for config in triggers_of(settings.triggers) for op in config.on]
    _check_removals(session, settings, {p.key for p in planned})
    return planned


def _plan(session: Session, settings: Settings, config: TriggerConfig, op: str) -> Planned:
    table = _table(session, settings, config)
    trial = render(settings, config, op, table, "trial")
    try:
        with session.transaction():
            script(session, settings, trial)
            raise _RolledBack
    except _RolledBack:
        pass
    except DatabaseError as exc:
        raise DeployError(f"[triggers.{config.name}] does not compile on {config.qualified} ({op}): "
                          f"{exc.message}",
                          hint="fix when: one SQL condition over new."
                          f"{'/old.' if op == 'update' else ''}<column>; qualify functions "
                          "(e.g. pg_catalog.lower): the search_path is empty") from None
    function_sql = render(settings, config, op, table, "function")
    trigger_sql = render(settings, config, op, table, "trigger")
    checksum = hashlib.sha256((function_sql + trigger_sql).encode()).hexdigest()
    return Planned(config, op, table, function_sql, trigger_sql, checksum)


def script(session: Session, settings: Settings, sql: str) -> None:
    """A rendered part, after the search_path pin every deploy script starts with (pg_catalog only:
    what the trigger function's empty search_path resolves too, whatever the role's default)."""
    session.script(";\n".join((queries(settings.schema)["pin_search_path"], sql)))


class _RolledBack(Exception):
    """Raised to roll a trial back."""


def _table(session: Session, settings: Settings, config: TriggerConfig) -> Table:
    where = f"[triggers.{config.name}]"
    row = session.one(queries(settings.schema)["trigger_table"],
                      {"schema": config.schema, "table": config.table})
    if row is None:
        raise DeployError(f"{where} table {config.qualified} does not exist",
                          hint="create the table first, or fix table (schema.table)")
    if row["relkind"] not in ("r", "p"):
        raise DeployError(f"{where} {config.qualified} is not a table (relkind {row['relkind']})",
                          hint="row triggers go on tables: name the table the view reads")
    if config.schema == settings.schema:
        raise DeployError(f"{where} {config.qualified} is one of jobkit's own tables",
                          hint="declare row triggers on your app's tables")
    if not row["can_trigger"]:
        raise DeployError(f"{where} role {row['role']} cannot create triggers on {config.qualified} "
                          f"(owned by {row['owner']})", hint=f"as {row['owner']}: GRANT USAGE ON SCHEMA "
                          f"{config.schema} TO {row['role']}; GRANT TRIGGER ON {config.qualified} TO "
                          f"{row['role']}")
    columns: dict[str, str] = dict(row["columns"] or {})
    pk = tuple(row["pk"] or ())
    if not pk:
        raise DeployError(f"{where} {config.qualified} has no primary key",
                          hint="add one: a job records the primary key of the row it came from")
    missing = [c for c in config.payload if c not in columns] if isinstance(config.payload, tuple) else []
    if missing:
        raise DeployError(f"{where} payload column {missing[0]!r} is not a column of {config.qualified}",
                          hint=f"its columns: {', '.join(sorted(columns))}")
    if config.key is not None and config.key not in columns:
        raise DeployError(f"{where} key column {config.key!r} is not a column of {config.qualified}",
                          hint=f"its columns: {', '.join(sorted(columns))}")
    return Table(row["regclass"], row["owner"], bool(row["owned"]), columns, pk)


def deployed(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """The managed row triggers with their state in the catalog (none before migration 0015)."""
    q = queries(settings.schema)
    if not session.scalar(q["row_triggers_table"]):
        return []
    return [dict(r) for r in session.all(q["row_triggers_deployed"])]


def _check_removals(session: Session, settings: Settings, wanted: set[tuple[str, str]]) -> None:
    q = queries(settings.schema)
    for row in deployed(session, settings):
        if (row["name"], row["op"]) in wanted or not row["present"]:
            continue
        info = session.one(q["trigger_table"], {"schema": row["table_schema"], "table": row["table_only"]})
        if info is not None and not info["owned"]:
            raise DeployError(
                f"[triggers.{row['name']}] was removed from jobkit.toml, but only {info['owner']} may drop "
                f"trigger {row['trigger_name']} on {row['table_name']}",
                hint=f"as {info['owner']}: DROP TRIGGER {row['trigger_name']} ON {row['table_name']}, "
                "then deploy again (or keep the declaration)")


def drift(session: Session, settings: Settings, planned: list[Planned]) -> list[str]:
    """What differs between the declared triggers and the database (`deploy --check`)."""
    have = {(r["name"], r["op"]): r for r in deployed(session, settings)}
    out = []
    for plan in planned:
        row = have.pop(plan.key, None)
        state = _state(session, settings, plan)
        if row is None:
            out.append(f"{plan.label()}: not deployed")
        elif state is None:
            out.append(f"{plan.label()}: dropped")
        elif not state["enabled"]:
            out.append(f"{plan.label()}: disabled")
        elif state["hash"] != row["definition"]:
            out.append(f"{plan.label()}: altered outside jobkit")
        elif row["checksum"] != plan.checksum:
            out.append(f"{plan.label()}: differs from jobkit.toml")
    out += [f"trigger {name} ({op} on {row['table_name']}): no longer declared, would be removed"
            for (name, op), row in sorted(have.items())]
    return out


def _state(session: Session, settings: Settings, plan: Planned) -> dict[str, Any] | None:
    row = session.one(queries(settings.schema)["row_trigger_state"], {
        "schema": plan.config.schema, "table": plan.config.table,
        "trigger": plan.config.trigger_name(settings.schema, plan.op),
        "function": f"{ident(settings.schema)}.{ident(plan.config.function_name(plan.op))}()"})
    return dict(row) if row is not None else None


def apply(session: Session, settings: Settings, planned: list[Planned], *, lock_timeout: timedelta,
          retry: Retry | None = None, echo: Echo | None = None) -> list[str]:
    """Bring the managed row triggers to what jobkit.toml declares, in one transaction (tried again
    when a table lock is not granted within ``lock_timeout``). Returns what changed."""
    retry = retry or Retry()
    try:
        return retrying("row triggers", retry, lock_timeout,
                        lambda: _apply_once(session, settings, planned, lock_timeout), echo)
    except DatabaseError as exc:
        hint = gave_up_hint(lock_timeout, retry) if lock_conflict(exc) else (
            exc.hint or "nothing was changed; fix the cause above and deploy again")
        raise DeployError(f"deploying row triggers failed and was rolled back: {exc.message}",
                          hint=hint) from exc


def _apply_once(session: Session, settings: Settings, planned: list[Planned],
                lock_timeout: timedelta) -> list[str]:
    q = queries(settings.schema)
    changes: list[str] = []
    with session.transaction():
        session.execute(q["pin_search_path"])
        session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
        have = {(r["name"], r["op"]): r for r in deployed(session, settings)}
        for plan in planned:
            change = _apply_one(session, settings, plan, have.pop(plan.key, None))
            if change:
                changes.append(f"{plan.label()} {change}")
        for row in have.values():
            _remove(session, settings, row)
            changes.append(f"trigger {row['name']} ({row['op']} on {row['table_name']}) removed")
    return changes


def _apply_one(session: Session, settings: Settings, plan: Planned, row: dict[str, Any] | None) -> str:
    """Replace the function when anything differs; re-create the trigger only when it is missing,
    disabled or altered (CREATE TRIGGER holds writes to the table until the deploy commits)."""
    before = _state(session, settings, plan)
    trigger = plan.config.trigger_name(settings.schema, plan.op)
    if before is not None and row is None and not before["ours"]:
        raise DeployError(f"{plan.label()}: a trigger named {trigger} already exists on the table and "
                          "jobkit does not manage it",
                          hint="rename or drop that trigger; jobkit never touches triggers it did not make")
    if (row is not None and before is not None and before["enabled"] and before["hash"] == row["definition"]
            and row["checksum"] == plan.checksum):
        return ""
    script(session, settings, plan.function_sql)
    names = {"trigger": (trigger,), "table": (plan.config.schema, plan.config.table),
             "function": (settings.schema, plan.config.function_name(plan.op))}
    if before is not None and _trigger_broken(before, row):
        if not plan.table.owned:
            raise DeployError(f"{plan.label()} was disabled or altered, and only {plan.table.owner} may "
                              "replace it", hint=f"as {plan.table.owner}: DROP TRIGGER {trigger} ON "
                              f"{plan.config.qualified}, then deploy again")
        session.execute_utility("drop trigger {trigger} on {table}", identifiers=names)
        before = None
    if before is None:
        script(session, settings, plan.trigger_sql)
    after = _state(session, settings, plan)
    session.execute(queries(settings.schema)["row_trigger_record"], {
        "name": plan.config.name, "op": plan.op, "table": plan.config.qualified, "trigger": trigger,
        "function": plan.config.function_name(plan.op),
        "spec": json_param({**plan.config.spec(), "pk": list(plan.table.pk)}),  # the move reads pk
        "checksum": plan.checksum, "definition": after["hash"] if after else ""})
    return "added" if row is None else "changed"


def _trigger_broken(state: dict[str, Any], row: dict[str, Any] | None) -> bool:
    """The trigger itself (not its function) is disabled, runs another function, or was altered."""
    if not state["enabled"] or not state["ours"]:
        return True
    return row is not None and state["hash"].split(":")[0] != row["definition"].split(":")[0]


def _remove(session: Session, settings: Settings, row: dict[str, Any]) -> None:
    names = {"trigger": (row["trigger_name"],), "table": (row["table_schema"], row["table_only"]),
             "function": (settings.schema, row["function_name"])}
    if row["present"]:
        session.execute_utility("drop trigger {trigger} on {table}", identifiers=names)
    session.execute_utility("drop function if exists {function}()", identifiers=names)
    session.execute(queries(settings.schema)["row_trigger_move"], {"name": row["name"]})
    session.execute(queries(settings.schema)["row_trigger_forget"], {"name": row["name"], "op": row["op"]})
