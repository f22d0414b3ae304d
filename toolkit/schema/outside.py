"""The part of a migration that must run outside any transaction (pure: text in, steps out).

A migration may end with the marker line ``-- jobkit:outside-transaction``. What comes before it is
the migration proper, applied in one transaction with its history row. What follows it is a list of
statements, each ended by a ``;`` at the end of a line, that deploy runs one by one in autocommit
after that transaction commits (toolkit/schema/migrations.py, run_outside). Three kinds are allowed,
each idempotent, so deploy can simply run them again after a crash:

- ``create [unique] index concurrently if not exists NAME on ...``: an INVALID leftover of NAME (a
  build that failed or was killed) is dropped first;
- ``drop index concurrently if exists ...``;
- a batched backfill: an UPDATE/DELETE/INSERT (or WITH ...) that touches only rows not yet done, at
  most ``%(batch)s`` of them (``... where id in (select id from ... where <not done> limit %(batch)s)``);
  deploy runs it, one short transaction each, until it touches no row.

A fresh install (`jobkit render`, the Supabase migration files) runs everything in one transaction
on empty tables: there each step takes its in-transaction form (:func:`transaction_form`): the index
statements without CONCURRENTLY, the backfill as one statement with ``limit null`` (no limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..exceptions import ResourceError

MARKER = "-- jobkit:outside-transaction"
BATCH = "%(batch)s"

_NAME = r'("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'
_CREATE = re.compile(rf"create\s+(?:unique\s+)?index\s+(concurrently\s+)if\s+not\s+exists\s+{_NAME}\s+on\s",
                     re.IGNORECASE)
_DROP = re.compile(r"drop\s+index\s+(concurrently\s+)if\s+exists\s", re.IGNORECASE)
_BACKFILL = re.compile(r"(update|delete|insert|with)\s", re.IGNORECASE)
_END = re.compile(r";[ \t]*(?:\n|$)")

Kind = Literal["create_index", "drop_index", "backfill"]


@dataclass(frozen=True)
class Step:
    """One statement run outside the transaction."""

    kind: Kind
    sql: str
    index: str | None = None  # create_index: the index's (unquoted) name

    def describe(self) -> str:
        if self.kind == "create_index":
            return f"index {self.index}"
        return " ".join(self.sql.split()[:4]) + " ..."


def split(sql: str, where: str = "a migration") -> tuple[str, list[Step]]:
    """(the migration proper, its outside-transaction steps). No marker: (sql, [])."""
    lines = sql.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    if not marks:
        return sql, []
    if len(marks) > 1:
        raise ResourceError(f"{where} has {len(marks)} `{MARKER}` lines",
                            hint="keep one marker line: all that follows it runs outside the transaction")
    inside, rest = "".join(lines[:marks[0]]), "".join(lines[marks[0] + 1:])
    return inside, [_step(text, where) for text in _statements(rest)]


def inside(sql: str) -> str:
    """The migration proper: what precedes the marker line (all of ``sql`` without one)."""
    return split(sql)[0]


def transaction_form(step: Step) -> str:
    """``step`` as one statement valid inside a transaction on a fresh install (ended by ``;``)."""
    if step.kind == "backfill":
        return step.sql.replace(BATCH, "null") + ";"
    found = (_CREATE if step.kind == "create_index" else _DROP).match(step.sql)
    if found is None:  # not a Step that _step made
        raise ResourceError(f"not an index statement: {step.sql[:60]!r}")
    return step.sql[:found.start(1)] + step.sql[found.end(1):] + ";"


def _statements(text: str) -> list[str]:
    code = "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("--"))
    return [part.strip() for part in _END.split(code) if part.strip()]


def _step(text: str, where: str) -> Step:
    if ";" in text:
        raise ResourceError(f"{where}: a statement after `{MARKER}` holds a `;` inside a line: {text[:60]!r}",
                            hint="end each statement with `;` at the end of its line, one statement each")
    if created := _CREATE.match(text):
        return Step("create_index", text, _unquote(created.group(2)))
    if _DROP.match(text):
        return Step("drop_index", text)
    if _BACKFILL.match(text) and BATCH in text:
        if "%" in text.replace(BATCH, ""):
            raise ResourceError(f"{where}: a backfill after `{MARKER}` holds a `%` besides {BATCH}",
                                hint="it is sent with a bound parameter: write chr(37) for a literal %")
        return Step("backfill", text)
    raise ResourceError(
        f"{where}: `{' '.join(text.split()[:3])} ...` cannot run outside the transaction",
        hint=f"after `{MARKER}` put only `create index concurrently if not exists`, `drop index concurrently "
             f"if exists`, or a batched backfill that touches at most {BATCH} rows not yet done per run")


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()
