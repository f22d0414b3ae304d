"""`jobkit render --supabase` writes a Supabase CLI migration once per set of new migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.exceptions import ConfigError
from jobkit.schema.supabase_cli import existing_migrations, write_functions, write_migration
from versions import HEAD, MIGRATIONS

WHEN = datetime(2026, 12, 1, 10, 30, 0, tzinfo=UTC)


def test_writes_a_timestamped_file_once(tmp_path: Path) -> None:
    path = write_migration(Settings(), tmp_path, now=WHEN)
    assert path == tmp_path / "migrations" / f"20261201103000_jobkit_{HEAD}.sql"
    assert write_migration(Settings(), tmp_path) is None
    assert len(list((tmp_path / "migrations").glob("*.sql"))) == 1
    assert set(existing_migrations(tmp_path / "migrations")) == {m[:4] for m in MIGRATIONS}


def test_changed_schema_setting_is_refused(tmp_path: Path) -> None:
    write_migration(Settings(), tmp_path, now=WHEN)
    with pytest.raises(ConfigError, match="rendered differently"):
        write_migration(Settings(schema="other"), tmp_path)


def test_file_applies_like_the_supabase_cli_does(tmp_path: Path, fresh_db: str) -> None:
    """The CLI runs each file as one implicit transaction; the file must not commit on its own."""
    path = write_migration(Settings(), tmp_path, now=WHEN)
    functions = write_functions(Settings(), tmp_path, now=WHEN)
    assert path is not None and functions is not None
    with Database(fresh_db).session() as s:
        with s.transaction():
            s.script(path.read_text())
            assert s.scalar("select count(*) from jobkit.schema_migrations") == len(MIGRATIONS)
        with s.transaction():
            s.script(functions.read_text())
        from jobkit.schema.deploy import DeployOptions, deploy

        # Schedules are not part of the migration file: `jobkit deploy` after `supabase db push` adds them.
        options = DeployOptions(check=True, schedules=False)
        report = deploy(Database(fresh_db), Settings(db_url=fresh_db), options, echo=lambda _m: None)
        assert report.head == HEAD
