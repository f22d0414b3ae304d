"""``[triggers.<name>]`` in jobkit.toml: a row change on an app table becomes a job, enqueued in the
same transaction (issue 24). Parsed here, for toolkit/config.py (the one config reader); deployed by
toolkit/schema/triggers.py.

    [triggers.receipt]
    table = "public.orders"          # schema-qualified, or a table of public
    on = ["update"]                  # insert, update, delete (one statement-level trigger each)
    when = "new.status = 'paid' and old.status is distinct from 'paid'"   # optional, SQL over new/old
    type = "send_receipt"            # the job type
    payload = "row"                  # "row" (the whole row), "pk", or a list of columns
    idempotency = "pk"               # optional: one unfinished job per row and trigger

or, instead of ``type``, an event (jobkit.emit) per row, its subscribers and waits served as any emit's:

    [triggers.paid]
    table = "public.orders"
    on = ["update"]
    when = "new.status = 'paid' and old.status is distinct from 'paid'"
    emit = "order.paid"              # the event's name
    key = "id"                       # optional: the event key's column (default: the primary key)
    payload = "row"                  # the event's data
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import validate as v
from .exceptions import ConfigError

OPERATIONS = ("insert", "update", "delete")
#: The short form of each operation in the names deploy derives (trigger and function).
SHORT = {"insert": "ins", "update": "upd", "delete": "del"}
MAX_NAME_BYTES = 63
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")
#: The dollar-quote tag of the trigger functions' bodies (a condition may not contain it).
BODY_TAG = "$jobkit_trigger$"
#: How sql/row_trigger.sql marks what `jobkit render` leaves for the catalog (a condition may not contain it).
TOKEN = "/*jobkit:"
_KEYS = {"table", "on", "when", "type", "emit", "key", "payload", "idempotency"}


@dataclass(frozen=True)
class TriggerConfig:
    """One declared row trigger."""

    name: str
    schema: str  # the table's schema
    table: str
    on: tuple[str, ...]
    type: str | None  # the job type; None: an emit trigger
    payload: str | tuple[str, ...]  # "row", "pk" or columns (an emit trigger's: the event's data)
    when: str | None = None
    idempotency: str | None = None  # "pk" or None
    emit: str | None = None  # the event name (instead of type)
    key: str | None = None  # an emit trigger's key column (None: the primary key)

    @property
    def qualified(self) -> str:
        """The table as the user wrote it, schema-qualified (``auth.users``)."""
        return f"{self.schema}.{self.table}"

    def trigger_name(self, jobkit_schema: str, op: str) -> str:
        """The managed trigger's name on the table (the prefix marks it as jobkit's)."""
        return f"{jobkit_schema}_{self.name}_{SHORT[op]}"

    def function_name(self, op: str) -> str:
        """The trigger function's name in jobkit's schema."""
        return f"rowtrigger_{self.name}_{SHORT[op]}"

    def spec(self) -> dict[str, Any]:
        """What was declared, as stored in jobkit.row_triggers and shown by `jobkit triggers list`."""
        spec: dict[str, Any] = {
            "table": self.qualified, "on": list(self.on), "when": self.when, "type": self.type,
            "payload": self.payload if isinstance(self.payload, str) else list(self.payload),
            "idempotency": self.idempotency}
        if self.emit is not None:
            spec.update(emit=self.emit, key=self.key)
        return spec


def parse_triggers(body: Any, jobkit_schema: str) -> dict[str, TriggerConfig]:
    """Every ``[triggers.<name>]`` table, validated."""
    return {name: _trigger(name, spec, jobkit_schema)
            for name, spec in v.table(body, "[triggers]").items()}


def _trigger(name: str, body: Any, jobkit_schema: str) -> TriggerConfig:
    where = f"[triggers.{name}]"
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(f"trigger name {name!r} is not valid",
                          hint="use 1-40 lower-case letters, digits and _, starting with a letter")
    table = v.table(body, where)
    v.only(table, _KEYS, where)
    for required in ("table", "on"):
        if required not in table:
            raise ConfigError(f"{where} needs {required}",
                              hint='e.g. table = "public.orders", on = ["insert"], type = "send_receipt"')
    schema, relation = _table(table["table"], where)
    job_type, emit, key = _target(table, where)
    config = TriggerConfig(
        name=name, schema=schema, table=relation, on=_on(table["on"], where),
        type=job_type, payload=_payload(table.get("payload", "row"), where),
        when=_when(table.get("when"), where), idempotency=_idempotency(table.get("idempotency"), where),
        emit=emit, key=key)
    if emit is not None and config.idempotency is not None:
        raise ConfigError(f"{where} idempotency applies to job triggers, not to emit",
                          hint="leave idempotency out: each subscriber of an event gets one job per event, "
                          "and every row change is an event of its own")
    for op in config.on:
        derived = config.trigger_name(jobkit_schema, op)
        if len(derived.encode()) > MAX_NAME_BYTES:
            raise ConfigError(f"{where}: the trigger name jobkit derives, {derived!r}, is over "
                              f"{MAX_NAME_BYTES} bytes", hint="use a shorter trigger name")
    return config


def _table(value: Any, where: str) -> tuple[str, str]:
    parts = value.split(".") if isinstance(value, str) else []
    if len(parts) == 1:
        parts = ["public", *parts]
    if len(parts) != 2 or not all(_IDENT_RE.fullmatch(p) for p in parts):
        raise ConfigError(f"{where} table {value!r} is not a table name",
                          hint='write schema.table, e.g. "auth.users" or "public.orders"')
    if parts[0].startswith("pg_") or parts[0] == "information_schema":
        raise ConfigError(f"{where} table {value!r} is a system table", hint="name an app table")
    return parts[0], parts[1]


def _on(value: Any, where: str) -> tuple[str, ...]:
    ops = [value] if isinstance(value, str) else value
    if not isinstance(ops, list) or not ops or not all(isinstance(o, str) for o in ops):
        raise ConfigError(f"{where} on must be a non-empty list of operations, got {value!r}",
                          hint='e.g. on = ["insert"] or on = ["insert", "update"]')
    lowered = [o.lower() for o in ops]
    bad = [o for o in lowered if o not in OPERATIONS]
    if bad:
        raise ConfigError(f"{where} on: {bad[0]!r} is not an operation",
                          hint="use insert, update and delete")
    if len(set(lowered)) != len(lowered):
        raise ConfigError(f"{where} on lists an operation twice", hint="name each operation once")
    return tuple(o for o in OPERATIONS if o in lowered)


def _target(table: Mapping[str, Any], where: str) -> tuple[str | None, str | None, str | None]:
    """(type, emit, key): exactly one of type (a job) and emit (an event); key only with emit."""
    if ("type" in table) == ("emit" in table):
        which = "either type or emit, not both" if "type" in table else "type or emit"
        raise ConfigError(f"{where} needs {which}",
                          hint='type = "send_receipt" makes a job per row, emit = "order.paid" an event')
    if "type" in table:
        if "key" in table:
            raise ConfigError(f"{where} key names an emit trigger's event key",
                              hint='leave key out, or write emit = "<event>" instead of type')
        return _job_type(table["type"], where), None, None
    key = table.get("key")
    if key is not None and not (isinstance(key, str) and _IDENT_RE.fullmatch(key)):
        raise ConfigError(f"{where} key must be a column name, got {key!r}",
                          hint='e.g. key = "customer_id", or leave key out for the primary key')
    return None, _event_name(table["emit"], where), key


def _event_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 200 or any(c in value for c in "\x00\x1f"):
        raise ConfigError(f"{where} emit must be an event name of 1 to 200 characters, got {value!r}",
                          hint='e.g. emit = "order.paid"')
    if BODY_TAG in value or TOKEN in value:  # the name is a literal in the trigger function's body
        raise ConfigError(f"{where} emit must not contain {BODY_TAG} or {TOKEN}",
                          hint='name the event plainly, e.g. emit = "order.paid"')
    return value


def _job_type(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} type must be a job type name, got {value!r}")
    return v.type_name(value)


def _payload(value: Any, where: str) -> str | tuple[str, ...]:
    if value in ("row", "pk"):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(c, str) and _IDENT_RE.fullmatch(c)
                                                 for c in value):
        if len(set(value)) != len(value):
            raise ConfigError(f"{where} payload lists a column twice", hint="name each column once")
        return tuple(value)
    raise ConfigError(f"{where} payload must be \"row\", \"pk\" or a list of column names, got {value!r}",
                      hint='e.g. payload = ["id", "email"]')


def _when(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where} when must be a non-empty SQL condition, got {value!r}",
                          hint="e.g. when = \"new.status = 'paid'\", or leave when out")
    if ";" in value or BODY_TAG in value or TOKEN in value or "\x00" in value:
        raise ConfigError(f"{where} when must be one SQL condition (no ';')",
                          hint="write one boolean expression over new and old")
    return value.strip()


def _idempotency(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if value == "pk":
        return "pk"
    raise ConfigError(f"{where} idempotency must be \"pk\", got {value!r}",
                      hint='idempotency = "pk" keeps one unfinished job per row; leave it out for none')


def triggers_of(settings_triggers: Mapping[str, TriggerConfig]) -> list[TriggerConfig]:
    """The declared triggers in name order."""
    return [settings_triggers[name] for name in sorted(settings_triggers)]
