"""The declared row triggers as a script (`jobkit render`, `jobkit render --supabase`): what deploy's
toolkit/schema/triggers.py does, for a database the renderer cannot read. sql/row_trigger.sql is
rendered without the table (its primary key and columns left as tokens) and handed, as data, to
sql/row_triggers_apply.sql, which fills them in from the catalog when psql or the Supabase CLI runs
it, checks what deploy checks, and creates, replaces and drops the managed triggers with deploy's
checksums (so a later `jobkit deploy --check` agrees)."""

from __future__ import annotations

import json
from typing import Any

from ..config import Settings
from ..triggerspec import TriggerConfig, triggers_of
from .render import environment, ident
from .triggers import render


def declared(settings: Settings) -> list[dict[str, Any]]:
    """One entry per declared trigger and operation, in deploy's order."""
    return [_entry(settings, config, op) for config in triggers_of(settings.triggers) for op in config.on]


def _entry(settings: Settings, config: TriggerConfig, op: str) -> dict[str, Any]:
    return {
        "name": config.name, "op": op, "schema": config.schema, "table": config.table,
        "label": config.qualified, "trigger": config.trigger_name(settings.schema, op),
        "function": config.function_name(op), "spec": config.spec(),
        "columns": list(config.payload) if isinstance(config.payload, tuple) else [],
        "key_column": config.key,
        "function_sql": render(settings, config, op, None, "function"),
        "trigger_sql": render(settings, config, op, None, "trigger"),
        "trial_sql": render(settings, config, op, None, "trial"),
    }


def render_apply(settings: Settings) -> str:
    """sql/row_triggers_apply.sql for these settings: brings a database's managed row triggers to
    what jobkit.toml declares (none declared: removes those an earlier script made)."""
    data = json.dumps(declared(settings), sort_keys=True, ensure_ascii=False)
    return environment().get_template("row_triggers_apply.sql").render(
        schema=settings.schema, s=ident(settings.schema), declared=data)
