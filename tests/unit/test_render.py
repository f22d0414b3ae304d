"""Rendering is deterministic, follows the schema setting, one file per migration (integration/test_render_install.py applies the output)."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobkit.config import Settings
from jobkit.exceptions import ResourceError
from jobkit.schema.render import ident, literal, migration_files, render_migrations, render_script


def test_same_settings_give_identical_bytes() -> None:
    assert render_script(Settings()) == render_script(Settings())
    assert [m.checksum for m in render_migrations(Settings())] == [
        m.checksum for m in render_migrations(Settings())]


def test_schema_setting_changes_output_and_checksums() -> None:
    assert render_script(Settings(schema="jobs_a")) != render_script(Settings())
    other = render_migrations(Settings(schema="jobs_a"))[0]
    assert other.checksum != render_migrations(Settings())[0].checksum


def test_job_type_settings_do_not_change_migrations(sample_config: Path) -> None:
    from jobkit.config import load_settings

    assert render_script(load_settings(sample_config, env={})) == render_script(Settings())


def test_quoting_filters() -> None:
    assert ident('we"ird') == '"we""ird"'
    assert literal("it's") == "'it''s'"
    with pytest.raises(ResourceError):
        literal("nul\x00")


def test_misnamed_extra_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "3_bad.sql").write_text("select 1;")
    with pytest.raises(ResourceError, match="misnamed"):
        migration_files([tmp_path])


def test_packaged_migrations_are_ordered() -> None:
    versions = [v for v, _n, _p in migration_files()]
    assert versions == sorted(versions) and versions[0] == "0001"
