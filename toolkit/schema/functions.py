"""sql/functions/: what every deploy re-applies (functions, views, triggers, grants), in one transaction.

Versioned migrations hold what cannot be re-applied (tables, columns, indexes, constraints, data
moves); everything else is written once, in the files of sql/functions/, and brought to what they say
on every deploy (sql/functions/README.md):

- each ``create or replace`` runs in a savepoint; one that PostgreSQL refuses because the object's
  shape changed (a function's return type or parameter names, a view's columns) drops the old object
  and creates it anew;
- a trigger is re-created only when its statement changed or it was dropped or disabled (CREATE
  TRIGGER blocks writes to its table until the transaction ends); its comment records the statement's
  sha256;
- what no file defines any more (a function, view or trigger of jobkit's schema) is dropped;
- the EXECUTE grants that other roles held on a function dropped and created anew are given back,
  then 99_grants.sql revokes and grants afresh.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import timedelta

from ..config import Settings
from ..connector import Session, sqlstate
from ..exceptions import DatabaseError, DeployError
from ..queries import queries
from .locks import Echo, Retry, gave_up_hint, lock_conflict, retrying
from .migrations import milliseconds
from .render import function_files, render_function_file
from .statements import split

# create or replace refused: 42P13 invalid_function_definition (a return type, a parameter name, a
# removed default), 42P16 invalid_table_definition (a view's columns), 42809 wrong_object_type.
_RESHAPED = frozenset({"42P13", "42P16", "42809"})
_FUNCTION = re.compile(r"^create or replace function \S+?\.\"?([a-z_][a-z0-9_]*)\"?\s*\(", re.I | re.M)
_VIEW = re.compile(r"^create or replace view \S+?\.\"?([a-z_][a-z0-9_]*)\"?", re.I | re.M)
_QUOTED = r'("(?:[^"]|"")+"|[a-z_][a-z0-9_]*)'
_TRIGGER = re.compile(rf"^create or replace trigger ([a-z_][a-z0-9_]*)\s.*?\son\s+{_QUOTED}\.{_QUOTED}",
                      re.I | re.S)
_GRANTS_FILE = "99_grants.sql"
_DROPPED = "jobkit: dropped "
_SQL_LANGUAGE = re.compile(r"\blanguage\s+sql\b", re.I)


@dataclass
class Changes:
    """What applying the files changed in the catalog."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # the grants' NOTICEs (a role that does not exist)

    def lines(self) -> list[str]:
        """One entry per kind of change: its count, and the objects when there are a few."""
        out = []
        for verb, objects in (("added", self.added), ("changed", self.changed), ("dropped", self.dropped)):
            if objects:
                names = f": {'; '.join(objects)}" if len(objects) <= 5 else ""
                out.append(f"{len(objects)} {verb}{names}")
        return out


class _Trial(Exception):
    """Raised to roll the transaction back: a trial (`deploy --check`, `--dry-run`)."""


@dataclass(frozen=True)
class _Statement:
    sql: str
    kind: str  # function / view / trigger / other
    name: str = ""
    table: tuple[str, ...] = ()


def apply(session: Session, settings: Settings, *, lock_timeout: timedelta, keep: bool = True,
          retry: Retry | None = None, echo: Echo | None = None) -> Changes:
    """Bring jobkit's functions, views, triggers and grants to what sql/functions/ says, in one
    transaction (rolled back when ``keep`` is false: `deploy --check` and `--dry-run`), tried again
    when a lock is not granted within ``lock_timeout`` (a trigger's table busy)."""
    retry = retry or Retry()
    try:
        return retrying("sql/functions/", retry, lock_timeout,
                        lambda: _apply_once(session, settings, lock_timeout, keep), echo)
    except DatabaseError as exc:
        hint = gave_up_hint(lock_timeout, retry) if lock_conflict(exc) else (
            exc.hint or "nothing was changed; fix the cause above and deploy again")
        raise DeployError(f"applying sql/functions/ failed and was rolled back: {exc.message}",
                          hint=hint) from exc


def _apply_once(session: Session, settings: Settings, lock_timeout: timedelta, keep: bool) -> Changes:
    q = queries(settings.schema)
    schema = {"schema": settings.schema}
    main, last = _statements(settings)
    try:
        with session.transaction():
            session.execute(q["pin_search_path"])
            session.execute(q["set_local_lock_timeout"], {"timeout": milliseconds(lock_timeout)})
            before = _fingerprint(session, q, schema)
            session.execute(q["functions_before"])
            session.execute(q["function_grants_keep"])
            # Bodies are checked after the stale functions are gone: an old overload still there
            # would make a call in a new SQL-language body ambiguous (as pg_dump's restores do).
            _set_check_bodies(session, q, "off")
            for statement in main:
                _apply_one(session, q, settings.schema, statement)
            _set(session, q, "views", ",".join(s.name for s in main if s.kind == "view"))
            _set(session, q, "triggers", ",".join(s.name for s in main if s.kind == "trigger"))
            session.notices.clear()
            session.execute(q["drop_stale"])
            dropped = [n.removeprefix(_DROPPED) for n in session.notices if n.startswith(_DROPPED)]
            _set_check_bodies(session, q, "on")
            for statement in main:
                if statement.kind == "function" and _SQL_LANGUAGE.search(statement.sql):
                    _script(session, q, statement.sql)  # validates its body, now unambiguous
            session.execute(q["function_grants_restore"])
            session.notices.clear()
            for statement in last:
                _script(session, q, statement.sql)
            notices = [n for n in session.notices if n.startswith("jobkit:")]
            after = _fingerprint(session, q, schema)
            if not keep:
                raise _Trial
    except _Trial:
        pass
    changes = _diff(before, after, dropped)
    changes.notices = notices
    return changes


def statements(settings: Settings) -> list[str]:
    """Every statement deploy applies, in order."""
    main, last = _statements(settings)
    return [s.sql for s in [*main, *last]]


def _statements(settings: Settings) -> tuple[list[_Statement], list[_Statement]]:
    main: list[_Statement] = []
    last: list[_Statement] = []
    for name in function_files():
        target = last if name == _GRANTS_FILE else main
        target += [_classify(text) for text in split(render_function_file(settings, name))]
    return main, last


def _classify(text: str) -> _Statement:
    body = _code(text)
    if match := _FUNCTION.match(body):
        return _Statement(text, "function", match.group(1))
    if match := _VIEW.match(body):
        return _Statement(text, "view", match.group(1))
    if match := _TRIGGER.match(body):
        table = (_unquote(match.group(2)), _unquote(match.group(3)))
        return _Statement(text, "trigger", match.group(1), table)
    return _Statement(text, "other")


def _code(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--")).strip()


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


def _apply_one(session: Session, q: dict[str, str], schema: str, statement: _Statement) -> None:
    if statement.kind == "trigger":
        _apply_trigger(session, q, statement)
        return
    if statement.kind == "other":
        _script(session, q, statement.sql)
        return
    try:
        with session.transaction():
            _script(session, q, statement.sql)
    except DatabaseError as exc:
        if sqlstate(exc) not in _RESHAPED:
            raise
        if statement.kind == "view":
            session.execute_utility("drop view {view}", identifiers={"view": (schema, statement.name)})
        else:
            _set(session, q, "function", statement.name)
            session.execute(q["drop_function_overloads"])
        _script(session, q, statement.sql)


def _apply_trigger(session: Session, q: dict[str, str], statement: _Statement) -> None:
    """Create the trigger unless it exists, enabled, from this very statement (its comment holds
    the statement's sha256): CREATE TRIGGER holds writes to the table until the deploy commits."""
    mark = "jobkit sha256:" + hashlib.sha256(statement.sql.encode()).hexdigest()
    table = ".".join(_ident(part) for part in statement.table)
    if session.scalar(q["trigger_checksum"], {"table": table, "name": statement.name}) == mark:
        return
    names = {"trigger": (statement.name,), "table": statement.table}
    session.execute_utility("drop trigger if exists {trigger} on {table}", identifiers=names)
    _script(session, q, statement.sql)
    session.execute_utility("comment on trigger {trigger} on {table} is {mark}", identifiers=names,
                            literals={"mark": mark})


def _script(session: Session, q: dict[str, str], sql: str) -> None:
    """One statement of the files, after the search_path pin every deploy script starts with (the
    transaction is pinned already: this keeps each script readable on its own in the server log)."""
    session.script(";\n".join((q["pin_search_path"], sql)))


def _set_check_bodies(session: Session, q: dict[str, str], value: str) -> None:
    session.execute(q["set_local_check_function_bodies"], {"value": value})


def _set(session: Session, q: dict[str, str], key: str, value: str) -> None:
    session.execute(q["deploy_set"], {"key": key, "value": value})


def _fingerprint(session: Session, q: dict[str, str], schema: dict[str, str]) -> dict[str, str]:
    return {row["object"]: row["hash"] for row in session.all(q["managed_fingerprint"], schema)}


def _diff(before: dict[str, str], after: dict[str, str], dropped: list[str]) -> Changes:
    return Changes(
        added=sorted(set(after) - set(before)),
        changed=sorted(o for o in set(before) & set(after) if before[o] != after[o]),
        dropped=sorted(set(before) - set(after)) or dropped,
    )


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
