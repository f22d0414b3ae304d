"""The one place that reads configuration: jobkit.toml, the environment and CLI overrides.

Database URL precedence (first one set wins):
  1. ``--db-url`` on the command line
  2. ``JOBKIT_DB_URL``
  3. ``SUPABASE_DB_URL``
  4. ``DATABASE_URL``
  5. ``db_url`` in jobkit.toml
  6. the local cluster started by ``jobkit db start`` (under ``JOBKIT_HOME``, default ``./.jobkit``)
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from . import validate as v
from .exceptions import ConfigError
from .triggerspec import TriggerConfig, parse_triggers

CONFIG_FILE = "jobkit.toml"
URL_ENV_VARS = ("JOBKIT_DB_URL", "SUPABASE_DB_URL", "DATABASE_URL")
_SCHEDULE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
#: The shortest lease that heartbeats (once a second, when a third of it is used) keep alive.
MIN_LEASE = timedelta(seconds=5)
LEASE_HINT = "heartbeats extend a lease once a third of it is used: 5s is the shortest that holds"


@dataclass(frozen=True)
class Backoff:
    """Retry delay: ``base * factor ** (attempt - 1)``, capped, then spread by ``± jitter``."""

    base: timedelta = timedelta(seconds=30)
    factor: float = 4.0
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.1


_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_PATH_RE = re.compile(r"payload((?:\.[A-Za-z0-9_-]+)*)")
CONCURRENCY_FIELDS = ("fair", "concurrency_key", "max_running_per_key", "max_running")


#: The longest concurrency key a job may carry (jobs_concurrency_key_length).
MAX_KEY = 1000
#: A template part that stands for the job's owner (``{owner}``): stored as ``{"ref": "owner"}``.
OWNER = "owner"


@dataclass(frozen=True)
class KeyTemplate:
    """A concurrency key made from a job's payload: ``"tenant:{payload.tenant_id}"``. Text is
    copied, ``{payload.a.b}`` is the payload's field ``a.b`` (a missing field renders as the empty
    string; an array element by its index: ``{payload.items.0}``), ``{owner}`` is the job's owner
    (the per-user API's caller; empty for other jobs), ``{{`` and ``}}`` are braces. Stored
    (job_types.key_template) as a JSON array of strings, paths and ``{"ref": "owner"}``: the
    database renders it with jsonb operators, never as SQL text."""

    source: str
    parts: tuple[str | tuple[str, ...] | None, ...]  # None: {owner}

    @classmethod
    def parse(cls, source: str, where: str) -> KeyTemplate:
        if not isinstance(source, str) or not source:
            raise ConfigError(f"{where} concurrency_key must be a non-empty string such as "
                              f"\"tenant:{{payload.tenant_id}}\", got {source!r}")
        parts: list[str | tuple[str, ...] | None] = []
        literal, at = "", 0
        for m in _PLACEHOLDER_RE.finditer(source):
            literal += source[at:m.start()]
            at = m.end()
            if m.group(0) in ("{{", "}}"):
                literal += m.group(0)[0]
                continue
            field_name = m.group(1).strip() if m.group(1) is not None else None
            path = _PATH_RE.fullmatch(field_name) if field_name is not None else None
            if path is None and field_name != OWNER:
                raise ConfigError(f"{where} concurrency_key {source!r}: {m.group(0)!r} is not a field",
                                  hint="write a field as {payload.tenant_id} (or {payload.a.b}), the job's "
                                  "owner as {owner}, a literal brace as {{ or }}")
            if literal:
                parts.append(literal)
            literal = ""
            parts.append(None if path is None else tuple(seg for seg in path.group(1).split(".") if seg))
        literal += source[at:]
        if literal:
            parts.append(literal)
        if sum(len(p) for p in parts if isinstance(p, str)) > MAX_KEY:
            raise ConfigError(f"{where} concurrency_key has over {MAX_KEY} characters of text",
                              hint=f"a job's key holds at most {MAX_KEY} characters: shorten the template")
        return cls(source, tuple(parts))

    @property
    def names_payload(self) -> bool:
        """Whether a payload field is part of the key (whoever writes the payload chooses it)."""
        return any(isinstance(p, tuple) for p in self.parts)

    def as_json(self) -> list[Any]:
        return [p if isinstance(p, str) else {"ref": OWNER} if p is None else list(p) for p in self.parts]

    def render(self, payload: Any, owner: str | None = None) -> str:
        """The key for ``payload`` (what the database's _render_key computes)."""
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            if part is None:
                out.append(owner or "")
                continue
            value: Any = payload
            for seg in part:
                if isinstance(value, dict):
                    value = value.get(seg)
                elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
                    value = value[int(seg)]
                else:
                    value = None
            out.append("" if value is None else value if isinstance(value, str) else json.dumps(value))
        return "".join(out)


@dataclass(frozen=True)
class TypeConfig:
    """Per job type settings; ``defaults`` applies to every type not listed."""

    max_attempts: int = 3
    lease: timedelta = timedelta(minutes=5)
    backoff: Backoff = field(default_factory=Backoff)
    wake_on_insert: bool = True
    rate_limit: str | None = None  # the rate-limit key this type's claims take tokens from
    fair: bool = False  # claims serve the type's concurrency keys round-robin (see KeyTemplate)
    concurrency_key: KeyTemplate | None = None  # a job's key when it is enqueued without one
    max_running_per_key: int | None = None  # running jobs per key, across every worker
    max_running: int | None = None  # running jobs of the type, across every worker


@dataclass(frozen=True)
class RateLimitConfig:
    """A token bucket shared by every worker: ``rate`` tokens per second, up to ``burst``."""

    rate: float
    burst: int


@dataclass(frozen=True)
class EventConfig:
    """``[events."<name>"]``: the job types that get one job per event of that name (subscribers)
    and how long its events are kept (None: 7 days)."""

    types: tuple[str, ...] = ()
    retention: timedelta | None = None


@dataclass(frozen=True)
class UserApiConfig:
    """``[user_api]``: the per-user job API for the app's signed-in users (Supabase ``authenticated``).
    ``types`` are the job types they may enqueue, each enqueue at most ``max_payload_bytes`` of JSON
    and ``limit`` enqueues per user (a token bucket per user)."""

    schema: str
    types: tuple[str, ...]
    max_payload_bytes: int = 16_384
    limit: RateLimitConfig = RateLimitConfig(rate=10 / 60, burst=5)


@dataclass(frozen=True)
class WakeConfig:
    """How the database wakes the worker."""

    transport: str = "auto"  # auto (pg_net when installed, else notify) | pg_net | notify
    timeout: timedelta = timedelta(seconds=5)
    max_fanout: int = 4
    batch_size: int = 100
    budget: timedelta = timedelta(seconds=25)


@dataclass(frozen=True)
class ScheduleConfig:
    """A schedule declared in jobkit.toml: a pg_cron schedule and its target."""

    schedule: str
    type: str | None = None
    sql: str | None = None


#: The built-in schedules deploy installs, and their default pg_cron schedules.
MAINTENANCE_DEFAULTS = {
    "wake": "* * * * *",            # backup wake-up of every type with due jobs
    "sweep-stuck": "* * * * *",     # expired leases back to pending / failed
    "sweep-dead": "*/5 * * * *",    # failed -> dead
    "prune": "17 * * * *",          # finished jobs, history and wake records past retention
    "prune-cron-history": "23 3 * * *",  # jobkit's rows of cron.job_run_details past retention
}


@dataclass(frozen=True)
class Settings:
    """Everything jobkit was configured with, validated."""

    schema: str = "jobkit"
    db_url: str | None = None
    defaults: TypeConfig = field(default_factory=TypeConfig)
    types: Mapping[str, TypeConfig] = field(default_factory=dict)
    retention: timedelta = timedelta(days=7)
    wake: WakeConfig = field(default_factory=WakeConfig)
    maintenance: Mapping[str, str | None] = field(default_factory=lambda: dict(MAINTENANCE_DEFAULTS))
    schedules: Mapping[str, ScheduleConfig] = field(default_factory=dict)
    ratelimits: Mapping[str, RateLimitConfig] = field(default_factory=dict)
    api_schema: str | None = None  # the Data API schema of wrappers for supabase-py (optional)
    user_api: UserApiConfig | None = None  # the per-user job API for end users (optional)
    payload_index: bool = False  # [dashboard] payload_index: a GIN index for payload search
    created_index: bool = False  # [dashboard] created_index: the jobs page's (created_at, id) index
    triggers: Mapping[str, TriggerConfig] = field(default_factory=dict)  # [triggers.<name>] (issue 24)
    events: Mapping[str, EventConfig] = field(default_factory=dict)  # [events."<name>"] (issue 25)
    home: Path = Path(".jobkit")
    source: Path | None = None

    def type_config(self, job_type: str) -> TypeConfig:
        return self.types.get(job_type, self.defaults)


def load_settings(
    path: str | Path | None = None,
    *,
    db_url: str | None = None,
    schema: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read jobkit.toml (``path``, ``JOBKIT_CONFIG`` or ./jobkit.toml when present) and the env."""
    environ = os.environ if env is None else env
    file = _config_path(path, environ)
    data = _read_toml(file) if file else {}
    settings = parse_settings(data, source=file, names=False)  # measured below, in the database used
    url = db_url or next((environ[v] for v in URL_ENV_VARS if environ.get(v)), None)
    home = Path(environ.get("JOBKIT_HOME") or settings.home)
    overrides: dict[str, Any] = {"home": home}
    if url:
        overrides["db_url"] = url
    if schema:
        overrides["schema"] = v.schema(schema)
    return check_names(replace(settings, **overrides))


def check_names(settings: Settings) -> Settings:
    """Refuse settings whose derived names (channels, pg_cron job names: names.py) would not fit
    PostgreSQL's 63 bytes, measured in the database the URL names (when it names one)."""
    schedules = [name for name, spec in settings.maintenance.items() if spec is not None]
    v.derived_names(settings.schema, [*schedules, *settings.schedules], _dbname(settings.db_url))
    return settings


def _dbname(url: str | None) -> str | None:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    if not url:
        return None
    try:
        return str(conninfo_to_dict(url).get("dbname") or "") or None
    except ProgrammingError:  # a malformed URL is reported where it is used
        return None


def worker_secret_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``JOBKIT_WORKER_SECRET``: the secret the worker checks wake-up signatures with, when it
    should not read it (and follow its rotations) from the database."""
    return (os.environ if env is None else env).get("JOBKIT_WORKER_SECRET") or None


def metrics_token_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``JOBKIT_METRICS_TOKEN``: the bearer token ``GET /metrics`` requires (without one, the worker
    answers /metrics on loopback only)."""
    return (os.environ if env is None else env).get("JOBKIT_METRICS_TOKEN") or None


def dashboard_auth_from_env(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """``JOBKIT_DASHBOARD_TOKEN`` (a shared operator token) and ``JOBKIT_DASHBOARD_JWT_SECRET`` (the
    Supabase project's JWT secret, to accept its JWTs) for `jobkit dashboard`; never options, so
    they stay out of shell history and process lists."""
    e = os.environ if env is None else env
    return e.get("JOBKIT_DASHBOARD_TOKEN") or None, e.get("JOBKIT_DASHBOARD_JWT_SECRET") or None


def supabase_api_from_env(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY for the Data API backend (None unless both are set)."""
    e = os.environ if env is None else env
    url, key = e.get("SUPABASE_URL"), e.get("SUPABASE_SERVICE_ROLE_KEY")
    return (url, key) if url and key else None


def parse_settings(data: Mapping[str, Any], *, source: Path | None = None, names: bool = True) -> Settings:
    """Validate a parsed jobkit.toml document (with ``names``, also the names derived from it:
    :func:`check_names`)."""
    v.only(data, {"schema", "db_url", "defaults", "types", "retention", "wake", "maintenance",
                 "schedules", "ratelimits", "api", "user_api", "dashboard", "triggers", "events"},
           "jobkit.toml")
    defaults = _type_config(data.get("defaults", {}), TypeConfig(), "[defaults]")
    types = {
        v.type_name(name): _type_config(body, defaults, f"[types.{name}]")
        for name, body in v.table(data.get("types", {}), "[types]").items()
    }
    schema = v.schema(data.get("schema", "jobkit"))
    api_schema = _api(data.get("api", {}))
    if api_schema == schema:
        raise ConfigError(f"[api] schema {api_schema!r} is jobkit's own schema",
                          hint="the Data API wrappers need a schema of their own, e.g. jobkit_api")
    settings = Settings(
        schema=schema,
        db_url=v.opt_str(data.get("db_url"), "db_url"),
        defaults=defaults,
        types=types,
        retention=v.positive_duration(data.get("retention", "7d"), "retention"),
        wake=_wake(data.get("wake", {})),
        maintenance=_maintenance(data.get("maintenance", {})),
        schedules={
            _schedule_name(name): _schedule(body, f"[schedules.{name}]")
            for name, body in v.table(data.get("schedules", {}), "[schedules]").items()
        },
        ratelimits={
            v.type_name(key): _ratelimit(body, f"[ratelimits.{key}]")
            for key, body in v.table(data.get("ratelimits", {}), "[ratelimits]").items()
        },
        api_schema=api_schema,
        user_api=_user_api(data.get("user_api"), schema, api_schema, types),
        payload_index=_dashboard(data.get("dashboard", {}), "payload_index"),
        created_index=_dashboard(data.get("dashboard", {}), "created_index"),
        triggers=parse_triggers(data.get("triggers", {}), schema),
        events={
            _event_name(name): _event(body, f'[events."{name}"]')
            for name, body in v.table(data.get("events", {}), "[events]").items()
        },
        source=source,
    )
    return check_names(settings) if names else settings


def _config_path(path: str | Path | None, environ: Mapping[str, str]) -> Path | None:
    if path is not None:
        return Path(path)
    if environ.get("JOBKIT_CONFIG"):
        return Path(environ["JOBKIT_CONFIG"])
    default = Path(CONFIG_FILE)
    return default if default.is_file() else None


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with file.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {file} not found", hint="run `jobkit init` to write one") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: invalid TOML: {exc}", hint="fix the syntax at that line") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file} is not UTF-8 (byte {exc.start})", hint="save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}",
                          hint="check the path and its permissions") from None


def _type_config(body: Any, base: TypeConfig, where: str) -> TypeConfig:
    table = v.table(body, where)
    v.only(table, {"max_attempts", "lease", "backoff", "wake_on_insert", "rate_limit", *CONCURRENCY_FIELDS},
           where)
    if where == "[defaults]" and any(k in table for k in CONCURRENCY_FIELDS):
        raise ConfigError("[defaults] cannot set concurrency keys or limits",
                          hint="set fair, concurrency_key, max_running_per_key and max_running "
                          "under [types.<name>]")
    attempts = table.get("max_attempts", base.max_attempts)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= 1000:
        raise ConfigError(f"{where} max_attempts must be an integer from 1 to 1000, got {attempts!r}")
    lease = v.positive_duration(table.get("lease", base.lease), f"{where} lease")
    if lease < MIN_LEASE:
        raise ConfigError(f"{where} lease must be at least 5s, got {table.get('lease')!r}", hint=LEASE_HINT)
    backoff = _backoff(table.get("backoff", {}), base.backoff, f"{where} backoff")
    wake_on_insert = table.get("wake_on_insert", base.wake_on_insert)
    if not isinstance(wake_on_insert, bool):
        raise ConfigError(f"{where} wake_on_insert must be true or false, got {wake_on_insert!r}")
    rate_limit = table.get("rate_limit", base.rate_limit)
    if rate_limit is not None:
        rate_limit = v.type_name(str(rate_limit))
    return TypeConfig(max_attempts=attempts, lease=lease, backoff=backoff,
                      wake_on_insert=wake_on_insert, rate_limit=rate_limit, **_concurrency(table, where))


def _concurrency(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """fair, concurrency_key, max_running_per_key, max_running; any of the last three makes the
    type fair (its claims go by key), and fair = false with one of them is refused."""
    template = table.get("concurrency_key")
    limits = {name: v.integer(table[name], f"{where} {name}", 1, 1_000_000)
              for name in ("max_running_per_key", "max_running") if name in table}
    fair = table.get("fair", template is not None or bool(limits))
    if not isinstance(fair, bool):
        raise ConfigError(f"{where} fair must be true or false, got {fair!r}")
    if not fair and (template is not None or limits):
        raise ConfigError(f"{where} sets fair = false with concurrency_key or a max_running limit",
                          hint="the limits are enforced by fair claims: remove fair = false")
    return {"fair": fair, **limits,
            "concurrency_key": KeyTemplate.parse(template, where) if template is not None else None}


def _api(body: Any) -> str | None:
    table = v.table(body, "[api]")
    v.only(table, {"schema"}, "[api]")
    return v.schema(table["schema"]) if "schema" in table else None


def _dashboard(body: Any, key: str) -> bool:
    table = v.table(body, "[dashboard]")
    v.only(table, {"payload_index", "created_index"}, "[dashboard]")
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"[dashboard] {key} must be true or false",
                          hint=DASHBOARD_HINTS[key])
    return value


DASHBOARD_HINTS = {
    "payload_index": "payload_index = true builds a GIN index for payload search",
    "created_index": "created_index = true builds the jobs page's (created_at, id) index",
}


def _user_api(body: Any, schema: str, api_schema: str | None,
              type_configs: Mapping[str, TypeConfig]) -> UserApiConfig | None:
    if body is None:
        return None
    table = v.table(body, "[user_api]")
    v.only(table, {"schema", "types", "max_payload_bytes", "rate", "burst"}, "[user_api]")
    if "schema" not in table or "types" not in table:
        raise ConfigError("[user_api] needs schema and types",
                          hint='e.g. schema = "jobkit_user" and types = ["export_report"]')
    name = v.schema(table["schema"])
    if name in (schema, api_schema):
        raise ConfigError(f"[user_api] schema {name!r} is already jobkit's or [api]'s",
                          hint="give the user API a schema of its own, e.g. jobkit_user")
    types = table["types"]
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise ConfigError("[user_api] types must be a non-empty list of job types",
                          hint='e.g. types = ["export_report"]')
    names = tuple(v.type_name(t) for t in types)
    _user_keys(names, type_configs)
    limit = _ratelimit({"rate": table.get("rate", "10/min"), "burst": table.get("burst", 5)}, "[user_api]")
    return UserApiConfig(
        schema=name, types=names,
        max_payload_bytes=v.integer(table.get("max_payload_bytes", 16_384), "[user_api] max_payload_bytes",
                                    2, 1_048_576),
        limit=limit)


def _user_keys(names: tuple[str, ...], type_configs: Mapping[str, TypeConfig]) -> None:
    """A [user_api] type's concurrency key is never chosen by the end user: its template may name
    the owner and literal text, no payload field (the user writes the payload). The database
    renders a user's job's key from the template and the owner only, whatever the template says."""
    for name in names:
        template = type_configs[name].concurrency_key if name in type_configs else None
        if template is not None and template.names_payload:
            raise ConfigError(
                f"[types.{name}] concurrency_key {template.source!r} names payload fields, but {name} is "
                "open to end users ([user_api] types), who write the payload and so would choose the key",
                hint='key their jobs by the owner instead, e.g. concurrency_key = "user:{owner}"')


def _event_name(name: str) -> str:
    if not 1 <= len(name) <= 200 or any(c in name for c in "\x00\x1f"):
        raise ConfigError(f"event name {name!r} is not valid: 1 to 200 characters",
                          hint='name events like [events."order.paid"]')
    return name


def _event(body: Any, where: str) -> EventConfig:
    table = v.table(body, where)
    v.only(table, {"types", "retention"}, where)
    types = table.get("types", [])
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{where} types must be a list of job types, got {types!r}",
                          hint=f'{where} types = ["send_receipt", "update_crm"]')
    if len(set(types)) != len(types):
        raise ConfigError(f"{where} types names a job type twice", hint="list each subscriber once")
    retention = table.get("retention")
    return EventConfig(types=tuple(v.type_name(t) for t in types),
                       retention=None if retention is None else v.positive_duration(
                           retention, f"{where} retention", timedelta(days=36500)))


def _ratelimit(body: Any, where: str) -> RateLimitConfig:
    table = v.table(body, where)
    v.only(table, {"rate", "burst"}, where)
    if "rate" not in table:
        raise ConfigError(f"{where} needs rate, e.g. rate = \"60/min\"")
    return RateLimitConfig(rate=v.rate(table["rate"], f"{where} rate"),
                           burst=v.integer(table.get("burst", 1), f"{where} burst", 1, 1_000_000))


def _wake(body: Any) -> WakeConfig:
    table = v.table(body, "[wake]")
    v.only(table, {"transport", "timeout", "max_fanout", "batch_size", "budget"}, "[wake]")
    transport = table.get("transport", "auto")
    if transport not in ("auto", "pg_net", "notify"):
        raise ConfigError(f"[wake] transport must be auto, pg_net or notify, got {transport!r}")
    return WakeConfig(
        transport=transport,
        # pg_net's timeout_milliseconds; the worker's longest drain (MAX_BUDGET_MS in endpoint.py)
        timeout=v.positive_duration(table.get("timeout", "5s"), "[wake] timeout",
                                    at_most=timedelta(minutes=5)),
        max_fanout=v.integer(table.get("max_fanout", 4), "[wake] max_fanout", 1, 64),
        batch_size=v.integer(table.get("batch_size", 100), "[wake] batch_size", 1, 10_000),
        budget=v.positive_duration(table.get("budget", "25s"), "[wake] budget",
                                   at_most=timedelta(minutes=15)),
    )


def _maintenance(body: Any) -> dict[str, str | None]:
    from .cron.spec import every, validate

    table = v.table(body, "[maintenance]")
    v.only(table, set(MAINTENANCE_DEFAULTS), "[maintenance]")
    result: dict[str, str | None] = dict(MAINTENANCE_DEFAULTS)
    for name, value in table.items():
        if value == "off":
            result[name] = None
        elif isinstance(value, str):
            result[name] = validate(value) if " " in value.strip() or value.startswith("@") else every(value)
        else:
            raise ConfigError(
                f"[maintenance] {name} must be a duration (\"1m\"), a cron expression or \"off\"")
    return result


def _schedule(body: Any, where: str) -> ScheduleConfig:
    from .cron.spec import every, validate

    table = v.table(body, where)
    v.only(table, {"every", "cron", "type", "sql"}, where)
    if ("every" in table) == ("cron" in table):
        raise ConfigError(f"{where} needs exactly one of every or cron")
    if ("type" in table) == ("sql" in table):
        raise ConfigError(f"{where} needs exactly one of type (wake that job type) or sql")
    schedule = every(str(table["every"])) if "every" in table else validate(str(table["cron"]))
    job_type = v.type_name(table["type"]) if "type" in table else None
    sql = v.opt_str(table.get("sql"), f"{where} sql")
    if sql is not None and not sql.strip():
        raise ConfigError(f"{where} sql is empty")
    return ScheduleConfig(schedule=schedule, type=job_type, sql=sql)


def _schedule_name(value: str) -> str:
    if not _SCHEDULE_RE.fullmatch(value):
        raise ConfigError(
            f"schedule name {value!r} is not valid",
            hint="use 1-40 lower-case letters, digits, _ and -, starting with a letter or digit",
        )
    if value in MAINTENANCE_DEFAULTS:
        raise ConfigError(f"schedule name {value!r} is a built-in schedule; set it under [maintenance]")
    return value


def _backoff(body: Any, base: Backoff, where: str) -> Backoff:
    table = v.table(body, where)
    v.only(table, {"base", "factor", "cap", "jitter"}, where)
    factor = table.get("factor", base.factor)
    jitter = table.get("jitter", base.jitter)
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 1 <= factor <= 100:
        raise ConfigError(f"{where} factor must be a number from 1 to 100, got {factor!r}")
    if not isinstance(jitter, (int, float)) or isinstance(jitter, bool) or not 0 <= jitter < 1:
        raise ConfigError(f"{where} jitter must be a fraction in [0, 1), got {jitter!r}")
    result = Backoff(
        base=v.positive_duration(table.get("base", base.base), f"{where} base"),
        factor=float(factor),
        cap=v.positive_duration(table.get("cap", base.cap), f"{where} cap"),
        jitter=float(jitter),
    )
    if result.cap < result.base:
        raise ConfigError(f"{where} cap ({table.get('cap')}) is shorter than base")
    return result


