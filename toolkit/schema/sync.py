"""The data deploy keeps in step with jobkit.toml: job type settings and runtime settings.

Both are rows, not migrations, so changing jobkit.toml never changes a migration's checksum.
Each ``*_diff`` returns only what differs, so a second deploy writes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from ..config import Settings, TypeConfig
from ..connector import Session, json_param
from ..exceptions import ConfigError
from ..names import wake_channel
from ..queries import queries

Diff = dict[str, Any]


def type_diff(session: Session, settings: Settings) -> Diff:
    """type -> desired row (None = delete) for every type whose stored settings differ."""
    current = {r["type"]: r for r in session.all(queries(settings.schema)["job_types_all"])}
    desired = {"*": _type_row("*", settings.defaults)}
    desired.update({name: _type_row(name, cfg) for name, cfg in settings.types.items()})
    diff: Diff = {name: row for name, row in desired.items() if current.get(name) != row}
    diff.update({name: None for name in current if name not in desired})
    return diff


def apply_types(session: Session, settings: Settings, diff: Diff) -> None:
    q = queries(settings.schema)
    with session.transaction():
        for name, row in sorted(diff.items()):
            if row is None:
                session.execute(q["job_type_delete"], {"type": name})
            else:
                template = row["key_template"]
                session.execute(q["job_type_upsert"],
                                {**row, "key_template": None if template is None else json_param(template)})


def check_ratelimit_names(session: Session, settings: Settings, deployed: bool) -> None:
    """Every rate_limit a job type names is declared in [ratelimits] or already in the database
    (`jobkit ratelimit set`): an unknown name would let the type's jobs run unlimited."""
    named = {name: cfg.rate_limit for name, cfg in [("defaults", settings.defaults), *settings.types.items()]
             if cfg.rate_limit and cfg.rate_limit not in settings.ratelimits}
    if named and deployed:
        stored = {r["key"] for r in session.all(queries(settings.schema)["ratelimits_all"])}
        named = {name: key for name, key in named.items() if key not in stored}
    for name, key in named.items():
        where = "[defaults]" if name == "defaults" else f"[types.{name}]"
        raise ConfigError(
            f"{where} rate_limit {key!r} names no rate limit",
            hint=f"declare [ratelimits.{key}] rate = \"60/min\" in jobkit.toml, or run "
            f"`jobkit ratelimit set {key} --rate 60/min`",
        )


def ratelimit_diff(session: Session, settings: Settings) -> Diff:
    """key -> (rate, burst) for every declared rate limit that is missing or different. Rate
    limits declared nowhere stay (they may come from `jobkit ratelimit set`)."""
    rows = session.all(queries(settings.schema)["ratelimits_all"])
    current = {r["key"]: (r["rate"], r["burst"]) for r in rows}
    return {key: (cfg.rate, cfg.burst) for key, cfg in settings.ratelimits.items()
            if current.get(key) != (cfg.rate, cfg.burst)}


def apply_ratelimits(session: Session, settings: Settings, diff: Diff) -> None:
    q = queries(settings.schema)
    with session.transaction():
        for key, (rate, burst) in sorted(diff.items()):
            session.execute(q["ratelimit_upsert"], {"key": key, "rate": rate, "burst": burst})


def event_diff(session: Session, settings: Settings) -> Diff:
    """event name -> (types, retention) to write, or None to delete ([events."<name>"] removed)."""
    rows = session.all(queries(settings.schema)["event_config_all"])
    current = {r["name"]: (tuple(r["types"]), r["retention"]) for r in rows}
    desired = {name: (cfg.types, cfg.retention) for name, cfg in settings.events.items()}
    diff: Diff = {name: row for name, row in desired.items() if current.get(name) != row}
    diff.update({name: None for name in current if name not in desired})
    return diff


def apply_events(session: Session, settings: Settings, diff: Diff) -> None:
    q = queries(settings.schema)
    with session.transaction():
        for name, row in sorted(diff.items()):
            if row is None:
                session.execute(q["event_config_delete"], {"name": name})
            else:
                session.execute(q["event_config_upsert"], {"name": name, "types": list(row[0]),
                                                           "retention": row[1]})


def runtime_diff(session: Session, settings: Settings) -> Diff:
    """setting key -> desired value for every runtime setting that differs."""
    q = queries(settings.schema)
    current = {r["key"]: r["value"] for r in session.all(q["settings_all"])}
    desired = _runtime(settings, transport=resolve_transport(session, settings))
    return {key: value for key, value in desired.items() if current.get(key) != value}


def apply_runtime(session: Session, settings: Settings, diff: Diff) -> None:
    q = queries(settings.schema)
    with session.transaction():
        for key, value in sorted(diff.items()):
            session.execute(q["setting_upsert"], {"key": key, "value": json_param(value)})


def resolve_transport(session: Session, settings: Settings) -> str:
    """``auto`` becomes pg_net when net.http_post exists in this database, else notify."""
    if settings.wake.transport != "auto":
        return settings.wake.transport
    has_net = session.scalar(queries(settings.schema)["pg_net_available"])
    return "pg_net" if has_net else "notify"


def describe(diff: Diff) -> list[str]:
    return [f"{key}={json.dumps(value)}" if not isinstance(value, dict) else key
            for key, value in sorted(diff.items())]


def _runtime(settings: Settings, *, transport: str) -> dict[str, Any]:
    wake = settings.wake
    return {
        "transport": transport,
        "wake_timeout_ms": int(wake.timeout.total_seconds() * 1000),
        "max_fanout": wake.max_fanout,
        "batch_size": wake.batch_size,
        "budget_ms": int(wake.budget.total_seconds() * 1000),
        "channel": wake_channel(settings.schema),
    }


def _type_row(name: str, cfg: TypeConfig) -> dict[str, Any]:
    return {
        "type": name, "max_attempts": cfg.max_attempts, "lease": cfg.lease,
        "backoff_base": cfg.backoff.base, "backoff_factor": cfg.backoff.factor,
        "backoff_cap": cfg.backoff.cap, "backoff_jitter": cfg.backoff.jitter,
        "wake_on_insert": cfg.wake_on_insert, "rate_limit": cfg.rate_limit, "fair": cfg.fair,
        "key_template": cfg.concurrency_key.as_json() if cfg.concurrency_key else None,
        "max_running_per_key": cfg.max_running_per_key, "max_running": cfg.max_running,
    }


class _DryRun(Exception):
    """Rolls back the trial run of the API script."""


def payload_index(session: Session, settings: Settings, *, apply: bool) -> list[str]:
    """Build or drop the payload search index to match ``[dashboard] payload_index``. CONCURRENTLY,
    in autocommit (never inside a transaction): writers are not blocked while it builds; an
    invalid leftover of a failed build is dropped and built again."""
    return _optional_index(session, settings, "payload", settings.payload_index, apply=apply)


def created_index(session: Session, settings: Settings, *, apply: bool) -> list[str]:
    """Build or drop the jobs page's keyset index (jobs_created_page_idx) to match ``[dashboard]
    created_index`` (issue 23: every insert paid for 0003's jobs_created_idx), as payload_index does."""
    return _optional_index(session, settings, "created", settings.created_index, apply=apply)


def _optional_index(session: Session, settings: Settings, name: str, wanted: bool, *,
                    apply: bool) -> list[str]:
    q = queries(settings.schema)
    row = session.one(q[f"{name}_index_state"])
    present, valid = row is not None, bool(row and row["valid"])
    if wanted and valid or not wanted and not present:
        return []
    if apply:
        if present:
            session.execute(q[f"{name}_index_drop"])
        if wanted:
            session.execute(q[f"{name}_index_create"])
    return [f"{name} index " + ("built" if wanted else "dropped")]


def api_changes(session: Session, settings: Settings, api_sql: str, *, apply: bool,
                schema: str | None = None, catalog: str = "api_catalog") -> list[str]:
    """What an API script (the Data API wrappers of [api], or the per-user API of [user_api]) would
    change in its schema, found by a trial run that is rolled back; with ``apply`` the script then
    runs for real, only when it changes something (a second deploy writes nothing)."""
    target = schema or settings.api_schema
    assert target is not None
    try:
        with session.transaction():
            # Both reads under the script's own search_path: pg_get_expr writes an operator
            # OPERATOR(pg_catalog.=) when the session's path would resolve its bare name elsewhere.
            session.execute(queries(settings.schema)["pin_search_path"])
            before = _api_catalog(session, settings, target, catalog)
            session.script(api_sql)
            after = _api_catalog(session, settings, target, catalog)
            raise _DryRun
    except _DryRun:
        pass
    changes = [f"+{sig}" for sig in after if sig not in before]
    changes += [f"-{sig}" for sig in before if sig not in after]
    changes += [f"~{sig}" for sig in after if sig in before and before[sig] != after[sig]]
    if changes and apply:
        with session.transaction():
            session.script(api_sql)
    return sorted(changes)


def _api_catalog(session: Session, settings: Settings, schema: str, catalog: str) -> dict[str, str]:
    rows = session.all(queries(settings.schema)[catalog], {"schema": schema})
    return {r["signature"]: r["body"] for r in rows}
