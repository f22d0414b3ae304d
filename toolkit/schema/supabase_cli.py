"""`jobkit render --supabase`: jobkit's migrations as Supabase CLI migration files.

Each file records which jobkit migrations it holds in ``-- jobkit-migration: <version> <sha256>``
lines; a new file holds only the ones no earlier file has, so rendering twice adds nothing.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path

from ..config import Settings
from ..exceptions import ConfigError
from ..queries import queries
from .migrations import RECUT_THROUGH
from .render import (
    Migration,
    environment,
    ident,
    render_functions,
    render_migrations,
    render_script,
    render_user_api,
)
from .trigger_script import render_apply

_MARK_RE = re.compile(r"^-- jobkit-migration: (\d{4}) ([0-9a-f]{64})$", re.MULTILINE)
_USER_API_RE = re.compile(r"^-- jobkit-user-api: ([0-9a-f]{64})$", re.MULTILINE)
_FUNCTIONS_RE = re.compile(r"^-- jobkit-functions: ([0-9a-f]{64})$", re.MULTILINE)
_TRIGGERS_RE = re.compile(r"^-- jobkit-triggers: ([0-9a-f]{64})$", re.MULTILINE)


def existing_migrations(migrations_dir: Path) -> dict[str, tuple[str, Path]]:
    """version -> (checksum, file) for every jobkit migration already in the folder."""
    found: dict[str, tuple[str, Path]] = {}
    for path in sorted(migrations_dir.glob("*.sql")):
        for version, checksum in _MARK_RE.findall(path.read_text(encoding="utf-8")):
            found[version] = (checksum, path)
    return found


def write_migration(
    settings: Settings, project_dir: Path, *, now: datetime | None = None, name: str = "jobkit"
) -> Path | None:
    """Write the pending jobkit migrations as one new file; None when there is nothing new."""
    folder = project_dir / "migrations"
    folder.mkdir(parents=True, exist_ok=True)
    have = existing_migrations(folder)
    pending = _pending(render_migrations(settings), have, settings.schema)
    if not pending:
        return None
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    path = folder / f"{stamp}_{name}_{pending[-1].version}.sql"
    path.write_text(_file_text(settings, pending), encoding="utf-8")
    return path


def write_user_api(settings: Settings, project_dir: Path, *, now: datetime | None = None) -> Path | None:
    """With ``[user_api]``: its script (sql/user_api.sql, idempotent) as a migration file, a new one
    only when it differs from the newest such file; None when there is nothing new."""
    script = render_user_api(settings)
    if script is None:
        return None
    digest = hashlib.sha256(script.encode()).hexdigest()
    folder = project_dir / "migrations"
    folder.mkdir(parents=True, exist_ok=True)
    written = sorted(folder.glob("*_jobkit_user_api.sql"))
    if written and _USER_API_RE.findall(written[-1].read_text(encoding="utf-8")) == [digest]:
        return None
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    path = folder / f"{stamp}_jobkit_user_api.sql"
    path.write_text(f"-- jobkit-user-api: {digest}\n{script}", encoding="utf-8")
    return path


def write_triggers(settings: Settings, project_dir: Path, *, now: datetime | None = None) -> Path | None:
    """The declared row triggers (sql/row_triggers_apply.sql: idempotent, reads the tables' primary
    keys from the catalog as it runs) as a migration file, a new one only when it differs from the
    newest such file; with no trigger declared, only to remove those an earlier file made. The
    name sorts after the functions file of the same stamp; the app tables' own migrations must
    come before it. None when there is nothing new."""
    folder = project_dir / "migrations"
    written = sorted(folder.glob("*_jobkit_triggers.sql")) if folder.is_dir() else []
    if not settings.triggers and not written:
        return None
    script = render_apply(settings)
    digest = hashlib.sha256(script.encode()).hexdigest()
    if written and _TRIGGERS_RE.findall(written[-1].read_text(encoding="utf-8")) == [digest]:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    path = folder / f"{stamp}_jobkit_triggers.sql"
    path.write_text(f"-- jobkit-triggers: {digest}\n{script}", encoding="utf-8")
    return path


def write_functions(settings: Settings, project_dir: Path, *, now: datetime | None = None) -> Path | None:
    """sql/functions/ as a migration file, a new one only when it differs from the newest such file
    (or from the functions in the newest jobkit migration file); None when there is nothing new.

    `jobkit deploy` re-applies these files itself; a Supabase CLI migration is a plain script, so
    this one first drops jobkit's functions (and with them its triggers) and creates them all again,
    keeping the EXECUTE grants other roles held, in the transaction the CLI wraps it in."""
    script = render_functions(settings)
    digest = hashlib.sha256(script.encode()).hexdigest()
    folder = project_dir / "migrations"
    folder.mkdir(parents=True, exist_ok=True)
    marked = [p for p in sorted(folder.glob("*.sql")) if _FUNCTIONS_RE.search(p.read_text(encoding="utf-8"))]
    if marked and _FUNCTIONS_RE.findall(marked[-1].read_text(encoding="utf-8")) == [digest]:
        return None
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d%H%M%S")
    path = folder / f"{stamp}_jobkit_functions.sql"
    path.write_text(f"-- jobkit-functions: {digest}\n{render_functions_replacement(settings, script)}",
                    encoding="utf-8")
    return path


def render_functions_replacement(settings: Settings, script: str) -> str:
    """The functions script preceded by what replaces the ones a database already has."""
    q = queries(settings.schema)
    return environment().get_template("functions_replace.sql").render(
        schema=settings.schema, s=ident(settings.schema), functions=script,
        keep_grants=q["function_grants_keep"], restore_grants=q["function_grants_restore"])


def _pending(local: list[Migration], have: dict[str, tuple[str, Path]], schema: str) -> list[Migration]:
    for migration in local:
        if migration.version not in have or have[migration.version][0] == migration.checksum:
            continue
        checksum, path = have[migration.version]
        # Recut by issue 22: an older file built the same tables, for the same schema.
        if migration.version <= RECUT_THROUGH and _records_into(path, schema):
            continue
        raise ConfigError(
            f"{path} holds jobkit migration {migration.version} rendered differently "
            f"(checksum {checksum[:12]}, now {migration.checksum[:12]})",
            hint="the schema setting changed since it was written: keep the old setting, "
            "or start a new Supabase project",
        )
    return [m for m in local if m.version not in have]


def _records_into(path: Path, schema: str) -> bool:
    """Whether a jobkit migration file records its versions in ``schema``'s history table (every
    file jobkit ever wrote does, through sql/record_migration.sql)."""
    return f"insert into {ident(schema)}.schema_migrations " in path.read_text(encoding="utf-8")


def _file_text(settings: Settings, pending: list[Migration]) -> str:
    marks = "".join(f"-- jobkit-migration: {m.version} {m.checksum}\n" for m in pending)
    return marks + render_script(settings, pending, transaction=False, functions=False)
