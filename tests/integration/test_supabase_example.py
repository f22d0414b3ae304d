"""The example Supabase CLI project in supabase/: its migration is exactly what `jobkit render
--supabase` writes today, and its pgTAP tests pass (run with pg_prove, as `supabase test db` does)
against a fresh PostgreSQL 15 database that got the migration the way the Supabase CLI applies it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from jobkit.config import Settings
from jobkit.schema.render import render_bootstrap
from versions import HEAD, MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "supabase"
TESTS = PROJECT / "tests"
JOBKIT_FILE = re.compile(r"^(\d{14})_jobkit_(\d{4})\.sql$")
USER_API_FILE = re.compile(r"^(\d{14})_jobkit_user_api\.sql$")
FUNCTIONS_FILE = re.compile(r"^(\d{14})_jobkit_functions\.sql$")
PRERECUT = ROOT / "tests" / "fixtures" / "prerecut" / "96ca538"
REGENERATE = (
    "regenerate it: rm supabase/migrations/*_jobkit_*.sql && "
    "jobkit -c supabase/jobkit.toml render --supabase --supabase-dir supabase"
)


def _tool(name: str) -> str:
    path = shutil.which(name) or f"/usr/bin/{name}"
    assert Path(path).exists(), f"{name} not found (apt-get install postgresql-15 libtap-parser-sourcehandler-pgtap-perl)"
    return path


def _committed() -> Path:
    files = [p for p in (PROJECT / "migrations").glob("*.sql") if JOBKIT_FILE.match(p.name)]
    assert len(files) == 1, f"supabase/migrations must hold exactly one jobkit migration, found {files}; {REGENERATE}"
    return files[0]


def _user_api_file() -> Path:
    return _one_file(USER_API_FILE, "user API file")


def _functions_file() -> Path:
    return _one_file(FUNCTIONS_FILE, "sql/functions/ file")


def _one_file(pattern: re.Pattern[str], what: str) -> Path:
    files = [p for p in (PROJECT / "migrations").glob("*.sql") if pattern.match(p.name)]
    assert len(files) == 1, f"supabase/migrations must hold exactly one {what}, found {files}; {REGENERATE}"
    return files[0]


def _render(project_dir: Path) -> subprocess.CompletedProcess[str]:
    """`jobkit -c supabase/jobkit.toml render --supabase --supabase-dir DIR`, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "jobkit", "-c", str(PROJECT / "jobkit.toml"), "render", "--supabase",
         "--supabase-dir", str(project_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )


def _pg_env(url: str) -> dict[str, str]:
    """libpq environment variables for ``url`` (psql and pg_prove both honour them)."""
    parts = urlsplit(url)
    env = {**os.environ, "PGDATABASE": unquote(parts.path.lstrip("/")), "PGCONNECT_TIMEOUT": "10"}
    if parts.hostname:
        env["PGHOST"] = parts.hostname
    if parts.port:
        env["PGPORT"] = str(parts.port)
    if parts.username:
        env["PGUSER"] = unquote(parts.username)
    if parts.password:
        env["PGPASSWORD"] = unquote(parts.password)
    for var in ("PGSERVICE", "PGOPTIONS", "PGSSLMODE"):
        env.pop(var, None)
    return env


def _psql(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def test_project_layout() -> None:
    config = (PROJECT / "config.toml").read_text()
    assert 'project_id = "jobkit-example"' in config
    assert re.search(r'^schemas = \["public", "graphql_public", "jobkit_user"\]$', config, re.MULTILINE)
    assert re.search(r"^major_version = 15$", config, re.MULTILINE)
    files = sorted(p.name for p in TESTS.glob("*.sql"))
    assert files, "supabase/tests holds no pgTAP files"
    for name in files:
        text = (TESTS / name).read_text()
        assert re.match(r"^(--[^\n]*\n)*begin;\n", text), f"{name} must start with begin;"
        assert "create extension if not exists pgtap with schema extensions;" in text, name
        assert re.search(r"^select plan\(\d+\);$", text, re.MULTILINE), name
        assert text.rstrip().endswith("select * from finish();\nrollback;"), name


def test_committed_migration_is_what_render_writes_today(tmp_path: Path) -> None:
    committed = _committed()
    assert JOBKIT_FILE.match(committed.name).group(2) == HEAD, (  # type: ignore[union-attr]
        f"{committed.name} stops before jobkit's head migration {HEAD}; {REGENERATE}"
    )
    project = tmp_path / "supabase"
    project.mkdir()
    result = _render(project)
    assert result.returncode == 0, result.stderr
    written = sorted((project / "migrations").glob("*.sql"))
    assert len(written) == 3 and JOBKIT_FILE.match(written[0].name), written
    assert FUNCTIONS_FILE.match(written[1].name) and USER_API_FILE.match(written[2].name), written
    assert written[1].read_text(encoding="utf-8") == _functions_file().read_text(encoding="utf-8"), REGENERATE
    assert written[2].read_text(encoding="utf-8") == _user_api_file().read_text(encoding="utf-8"), REGENERATE
    assert written[0].name.split("_", 1)[1] == committed.name.split("_", 1)[1]
    assert written[0].read_text(encoding="utf-8") == committed.read_text(encoding="utf-8"), (
        f"{committed.relative_to(ROOT)} differs from `jobkit render --supabase` output; {REGENERATE}"
    )
    marks = re.findall(r"^-- jobkit-migration: (\d{4}) [0-9a-f]{64}$", committed.read_text(), re.MULTILINE)
    assert marks == [m[:4] for m in MIGRATIONS]


def test_render_into_the_example_adds_nothing(tmp_path: Path) -> None:
    """The committed file's marks cover every migration: rendering into the project writes nothing."""
    copy = tmp_path / "supabase"
    shutil.copytree(PROJECT, copy)
    before = sorted(p.name for p in (copy / "migrations").iterdir())
    result = _render(copy)
    assert result.returncode == 0, result.stderr
    assert "nothing written" in result.stdout
    assert sorted(p.name for p in (copy / "migrations").iterdir()) == before


def test_pgtap_suite_passes_on_the_applied_migration(fresh_db: str) -> None:
    env = _pg_env(fresh_db)
    # Like `supabase db push`: the whole file in one transaction.
    for migration in (_committed(), _functions_file(), _user_api_file()):  # in file-name order, as the CLI
        applied = _psql(env, "--single-transaction", "-f", str(migration))
        assert applied.returncode == 0, applied.stderr
    _prove(env)


def test_a_project_from_before_the_recut_gets_the_later_migrations_and_a_functions_file(
        tmp_path: Path, fresh_db: str) -> None:
    """A project whose jobkit migration was rendered before issue 22 (its 0001..0013 carried the
    functions): rendering into it writes only the migrations after 0013 (none of 0001..0013 again)
    and the sql/functions/ file, which replaces the functions its database has (a changed signature
    included) with the pgTAP suite passing."""
    project = tmp_path / "supabase"
    (project / "migrations").mkdir(parents=True)
    files = sorted(PRERECUT.glob("*.sql"))
    checksums = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    old = "".join(f"-- jobkit-migration: {p.name[:4]} {checksums[p]}\n" for p in files)
    for path in files:  # as render_script wrote each unit then: bootstrap, migration, history row
        old += render_bootstrap(Settings()) + path.read_text(encoding="utf-8")
        old += ('insert into "jobkit".schema_migrations (version, name, checksum)\nvalues '
                f"('{path.name[:4]}', '{path.stem[5:]}', '{checksums[path]}');\n")
    (project / "migrations" / "20261203000000_jobkit_0013.sql").write_text(old, encoding="utf-8")
    result = _render(project)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (project / "migrations").glob("*.sql"))
    later = [m for m in MIGRATIONS if m[:4] > "0013"]
    assert [bool(FUNCTIONS_FILE.match(n)) for n in written] == [False] + [False] * bool(later) + [True, False], written
    if later:  # the one new file holds exactly the migrations after the recut ones
        new = (project / "migrations" / written[1]).read_text(encoding="utf-8")
        assert re.findall(r"^-- jobkit-migration: (\d{4}) ", new, re.MULTILINE) == [m[:4] for m in later]
    env = _pg_env(fresh_db)
    for name in written:
        applied = _psql(env, "--single-transaction", "-f", str(project / "migrations" / name))
        assert applied.returncode == 0, applied.stderr
    _prove(env)


def _prove(env: dict[str, str]) -> None:
    # Like `supabase test db`: pgTAP in schema extensions.
    setup = _psql(env, "-c", "create schema if not exists extensions; "
                             "create extension if not exists pgtap with schema extensions;")
    assert setup.returncode == 0, setup.stderr

    prove = subprocess.run(
        [_tool("pg_prove"), "--ext", ".pg", "--ext", ".sql", "-r", str(TESTS.relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    output = prove.stdout + prove.stderr
    assert prove.returncode == 0, output
    assert prove.stdout.rstrip().endswith("Result: PASS"), output
    ran = re.search(r"^Files=(\d+), Tests=(\d+)", prove.stdout, re.MULTILINE)
    assert ran and int(ran.group(1)) == len(list(TESTS.glob("*.sql"))) and int(ran.group(2)) > 0, output

    # Every test file rolled back: no job, no grant on extensions, no history row beyond the file's.
    left = _psql(env, "-At", "-c",
                 "select (select count(*) from jobkit.jobs), (select count(*) from jobkit.job_attempts), "
                 "(select count(*) from jobkit.schema_migrations), "
                 "has_schema_privilege('anon', 'extensions', 'usage')")
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == f"0|0|{len(MIGRATIONS)}|f"

