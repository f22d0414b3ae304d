"""Settings -> SQL text. Pure: the same settings always give byte-identical output.

Jinja2 touches only deploy-time structure (the schema name); every runtime value is a bound
parameter. Identifiers go through the ``ident`` filter, string literals through ``literal``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

from ..config import Settings
from ..exceptions import ResourceError
from ..resources import read_text, sql_root
from . import outside

_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One rendered, versioned migration."""

    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def ident(name: str) -> str:
    """Quote an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: object) -> str:
    """Quote an SQL string literal (standard_conforming_strings)."""
    text = str(value)
    if "\x00" in text:
        raise ResourceError("NUL byte in an SQL literal")
    return "'" + text.replace("'", "''") + "'"


def environment(extra_dirs: Sequence[Path] = ()) -> jinja2.Environment:
    """The jinja2 environment over the packaged sql/ (and any extra migration folders)."""
    root = sql_root()

    def load(name: str) -> str:
        for folder in extra_dirs:
            candidate = folder / Path(name).name
            if name.startswith("migrations/") and candidate.is_file():
                return candidate.read_text(encoding="utf-8")
        return read_text(root, name)

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["ident"] = ident
    env.filters["literal"] = literal
    return env


def migration_files(extra_dirs: Sequence[Path] = ()) -> list[tuple[str, str, str]]:
    """(version, name, template path) for every migration, ordered by version."""
    found: dict[str, tuple[str, str, str]] = {}
    for file_name in _names(sql_root().joinpath("migrations")):
        _add(found, file_name)
    for folder in extra_dirs:
        for path in sorted(folder.glob("*.sql")):
            _add(found, path.name)
    return [found[v] for v in sorted(found)]


def render_migrations(settings: Settings, extra_dirs: Sequence[Path] = ()) -> list[Migration]:
    """Render every migration for these settings."""
    env = environment(extra_dirs)
    context = _context(settings)
    return [
        Migration(version, name, env.get_template(path).render(context))
        for version, name, path in migration_files(extra_dirs)
    ]


def function_files() -> list[str]:
    """The files of sql/functions/, in the order deploy applies them (by name)."""
    return _names(sql_root().joinpath("functions"))


def render_function_file(settings: Settings, name: str) -> str:
    """One file of sql/functions/ for these settings."""
    return environment().get_template(f"functions/{name}").render(_context(settings))


def render_tables(settings: Settings) -> str:
    """sql/schema/ for these settings: jobkit's tables as they are now (what the migrations build,
    step by step), without what sql/functions/ adds."""
    env = environment()
    return "\n".join(env.get_template(f"schema/{name}").render(_context(settings))
                     for name in _names(sql_root().joinpath("schema")))


def render_bootstrap(settings: Settings) -> str:
    return environment().get_template("bootstrap.sql").render(_context(settings))


def render_record(settings: Settings, migration: Migration) -> str:
    """The statement that records ``migration`` in the history table."""
    context = {**_context(settings), "version": migration.version, "name": migration.name,
               "checksum": migration.checksum}
    return environment().get_template("record_migration.sql").render(context)


def render_unit(settings: Settings, migration: Migration, *, bootstrap: bool = True) -> str:
    """What one deploy transaction runs: bootstrap, the migration (up to its outside-transaction
    marker, see outside.py), its history row. ``bootstrap=False``: a later migration of a script
    whose first one bootstrapped (same transaction, the search_path already set)."""
    head = (render_bootstrap(settings),) if bootstrap else ()
    return "\n".join((*head, outside.inside(migration.sql), render_record(settings, migration)))


def render_fresh_unit(settings: Settings, migration: Migration, *, bootstrap: bool = True) -> str:
    """render_unit plus the migration's outside-transaction statements in their in-transaction form:
    what a fresh install (empty tables, one transaction) runs for ``migration``."""
    _, steps = outside.split(migration.sql, f"migration {migration.version}_{migration.name}")
    unit = render_unit(settings, migration, bootstrap=bootstrap)
    return "\n".join([unit, *(outside.transaction_form(s) for s in steps)])


def render_deploy_unit(settings: Settings, migration: Migration) -> str:
    """What deploy runs for ``migration`` (deploy --dry-run shows it): its transaction (render_unit),
    then its outside-transaction statements as deploy sends them, after that commit."""
    _, steps = outside.split(migration.sql, f"migration {migration.version}_{migration.name}")
    if not steps:
        return render_unit(settings, migration)
    note = ("-- after that commit, outside any transaction, one by one (a backfill again and again, "
            "%(batch)s bound to the batch size, until it touches no row):")
    return "\n".join([render_unit(settings, migration), note, *(f"{s.sql};" for s in steps)])


def render_bridge(settings: Settings, step: str) -> str:
    """One step of the upgrade bridge from a pre-squash deployment (sql/bridge/<step>.sql)."""
    return environment().get_template(f"bridge/{step}.sql").render(_context(settings))


def render_script(
    settings: Settings, migrations: Iterable[Migration] | None = None, *, transaction: bool = True,
    functions: bool = True, row_triggers: str = "",
) -> str:
    """The complete SQL for a fresh database, ready for psql (one transaction) or a Supabase
    migration file (``transaction=False``: the Supabase CLI wraps each file in one).
    ``row_triggers`` is trigger_script.render_apply's script for the declared [triggers] (the
    caller renders it: trigger_script builds on this module), applied after the functions."""
    chosen = list(migrations) if migrations is not None else render_migrations(settings)
    header = (
        "-- Generated by jobkit render. Do not edit: change jobkit.toml and render again.\n"
        f"-- schema: {settings.schema}; migrations: {', '.join(m.version for m in chosen)}\n"
    )
    body = "\n".join(
        f"-- ---- migration {m.version}_{m.name} (sha256 {m.checksum}) ----\n"
        + render_fresh_unit(settings, m, bootstrap=i == 0)  # one transaction: bootstrap once
        for i, m in enumerate(chosen)
    )
    if chosen and chosen[0].version == "0001":  # a fresh install: every constraint valid at the end
        body += "\n" + environment().get_template("validate_fresh.sql").render(_context(settings))
    if chosen and functions:
        body += f"\n-- ---- sql/functions/ (re-applied by every deploy) ----\n{render_functions(settings)}"
    api = render_api(settings)
    if api:
        body += f"\n-- ---- Data API schema {settings.api_schema} ----\n{api}"
    if chosen and functions and row_triggers:
        body += f"\n-- ---- declared row triggers ([triggers]) ----\n{row_triggers}"
    if not transaction:
        return f"{header}\n{body}"
    return f"{header}begin;\n\n{body}\ncommit;\n"


def render_functions(settings: Settings) -> str:
    """Every file of sql/functions/, rendered, in the order deploy applies them, as one script (for
    a fresh database: psql scripts and the Supabase migration files)."""
    return "\n".join(render_function_file(settings, name) for name in function_files())


def render_api(settings: Settings) -> str | None:
    """The Data API wrapper schema (sql/api.sql) when ``[api] schema`` is configured."""
    if settings.api_schema is None:
        return None
    context = {**_context(settings), "api": ident(settings.api_schema), "api_name": settings.api_schema}
    return environment().get_template("api.sql").render(context)


def render_user_api(settings: Settings) -> str | None:
    """The per-user job API (sql/user_api.sql) when ``[user_api]`` is configured."""
    if settings.user_api is None:
        return None
    context = {**_context(settings), "u": ident(settings.user_api.schema), "user_api": settings.user_api}
    return environment().get_template("user_api.sql").render(context)


def _context(settings: Settings) -> dict[str, object]:
    return {"schema": settings.schema, "s": ident(settings.schema)}


def _names(folder: Traversable) -> list[str]:
    return sorted(item.name for item in folder.iterdir() if item.name.endswith(".sql"))


def _add(found: dict[str, tuple[str, str, str]], file_name: str) -> None:
    match = _MIGRATION_RE.match(file_name)
    if not match:
        raise ResourceError(
            f"migration file {file_name} is misnamed",
            hint="name migrations NNNN_lower_snake_name.sql",
        )
    version, name = match.groups()
    if version in found and found[version][2] != f"migrations/{file_name}":
        raise ResourceError(f"two migrations share version {version}")
    found[version] = (version, name, f"migrations/{file_name}")


def write_units(settings: Settings, out_dir: Path) -> list[Path]:
    """One file per migration (``0001_baseline.sql``, ...), each as `jobkit deploy` would apply it (its
    outside-transaction statements in their in-transaction form: each file runs as one transaction)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for migration in render_migrations(settings):
        target = out_dir / f"{migration.version}_{migration.name}.sql"
        target.write_text(render_fresh_unit(settings, migration), encoding="utf-8")
        written.append(target)
    return written
