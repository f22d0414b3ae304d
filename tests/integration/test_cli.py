"""The click shell: help, version, exit codes, one-line errors (CliRunner and a real subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from jobkit import __version__
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.schema.render import render_script
from versions import HEAD, MIGRATIONS


def _run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


def test_version() -> None:
    result = _run("--version")
    assert result.exit_code == 0 and __version__ in result.output


@pytest.mark.parametrize("path", _commands(cli))
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = _run(*path, "--help")
    assert result.exit_code == 0 and "Example" in result.output


def test_render_prints_the_script() -> None:
    result = _run("render")
    assert result.exit_code == 0 and result.output == render_script(Settings())


def test_render_out_dir(tmp_path: Path) -> None:
    result = _run("render", "--out", str(tmp_path / "sql"))
    assert result.exit_code == 0
    assert [p.name for p in sorted((tmp_path / "sql").iterdir())] == [f"{m}.sql" for m in MIGRATIONS]


def test_render_supabase_twice_writes_once(tmp_path: Path) -> None:
    first = _run("render", "--supabase", "--supabase-dir", str(tmp_path))
    second = _run("render", "--supabase", "--supabase-dir", str(tmp_path))
    assert first.exit_code == 0 and "wrote" in first.output
    assert second.exit_code == 0 and "nothing written" in second.output
    written = sorted(p.name.split("_", 1)[1] for p in (tmp_path / "migrations").iterdir())
    assert written == [f"jobkit_{HEAD}.sql", "jobkit_functions.sql"]  # the tables' migrations, the functions


def test_deploy_check_exit_codes(fresh_db: str) -> None:
    behind = _run("deploy", "--db-url", fresh_db, "--check")
    assert behind.exit_code == 3 and "pending migration" in behind.output
    dry = _run("deploy", "--db-url", fresh_db, "--dry-run")
    assert dry.exit_code == 0 and f"would apply {', '.join(MIGRATIONS)}" in dry.output
    with Database(fresh_db).session() as s:
        assert s.scalar("select count(*) from pg_namespace where nspname = 'jobkit'") == 0
    applied = _run("deploy", "--db-url", fresh_db)
    assert applied.exit_code == 0 and "applied 0001_baseline" in applied.output
    again = _run("deploy", "--db-url", fresh_db)
    assert again.exit_code == 0 and "nothing changed" in again.output
    assert _run("deploy", "--db-url", fresh_db, "--check").exit_code == 0


def test_unreachable_server_is_one_line_without_the_password() -> None:
    result = _run("deploy", "--db-url", "postgresql://app:s3cret-pw@127.0.0.1:1/app")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: cannot connect to postgresql://app:***@127.0.0.1:1/app")
    assert lines[1].startswith("hint: ") and len(lines) == 2
    assert "s3cret-pw" not in result.output


def test_invalid_config_is_rejected_before_any_connection(tmp_path: Path, fresh_db: str) -> None:
    config = tmp_path / "jobkit.toml"
    config.write_text('schema = "x; drop table y"\n')
    result = _run("-c", str(config), "deploy", "--db-url", fresh_db)
    assert result.exit_code == 1 and "not a valid schema name" in result.output
    with Database(fresh_db).session() as s:
        assert s.scalar("select count(*) from pg_namespace where nspname not like 'pg_%%' "
                        "and nspname not in ('public', 'information_schema')") == 0


def test_usage_errors_exit_2() -> None:
    assert _run("deploy", "--no-such-flag").exit_code == 2
    assert _run("no-such-command").exit_code == 2


def test_db_url_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBKIT_HOME", str(tmp_path / "nowhere"))
    result = _run("db", "url")
    assert result.exit_code == 1 and "jobkit db start" in result.output


def test_deploy_without_any_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JOBKIT_HOME", str(tmp_path / ".jobkit"))
    result = _run("deploy")
    assert result.exit_code == 1 and "no database URL configured" in result.output


def test_real_subprocess_deploy(fresh_db: str) -> None:
    cmd = [sys.executable, "-m", "jobkit", "deploy", "--db-url", fresh_db]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    check = subprocess.run([*cmd, "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and "up to date" in check.stdout


def test_enqueue_cli(db_url: str, tmp_path: Path) -> None:
    payload = tmp_path / "p.json"
    payload.write_text('{"to": "a@example.com"}')
    first = _run("enqueue", "send_email", "--new-type", "--payload", f"@{payload}", "--key", "k1", "--delay",
                 "5m", "--priority", "3", "--db-url", db_url)
    assert first.exit_code == 0
    again = _run("enqueue", "send_email", "--payload", "{}", "--key", "k1", "--db-url", db_url)
    assert again.output == first.output  # the idempotency key returns the same job
    with Database(db_url).session() as s:
        row = s.one("select payload, priority, extract(epoch from scheduled_for - created_at) as delay "
                    "from jobkit.jobs")
    assert row is not None and row["payload"] == {"to": "a@example.com"} and row["priority"] == 3
    assert 295 < float(row["delay"]) <= 300


@pytest.mark.parametrize(("args", "message"), [
    (["--payload", "{oops"], "--payload is not valid JSON"),
    (["--payload", "@/nonexistent/file.json"], "cannot read /nonexistent/file.json"),
    (["--delay", "soon"], "is not a duration"),
])
def test_enqueue_cli_bad_input_enqueues_nothing(db_url: str, args: list[str], message: str) -> None:
    result = _run("enqueue", "t", *args, "--db-url", db_url)
    assert result.exit_code == 1 and message in result.output
    with Database(db_url).session() as s:
        assert s.scalar("select count(*) from jobkit.jobs") == 0
    assert _run("enqueue", "t", "--no-such", "--db-url", db_url).exit_code == 2


def test_ratelimit_cli(db_url: str) -> None:
    assert "mailgun: 60/min, burst 10" in _run("ratelimit", "set", "mailgun", "--rate", "60/min",
                                                "--burst", "10", "--db-url", db_url).output
    listed = _run("ratelimit", "list", "--db-url", db_url)
    assert "mailgun: 60/min (one token every 1s), burst 10" in listed.output
    bad = _run("ratelimit", "set", "x", "--rate", "fast", "--db-url", db_url)
    assert bad.exit_code == 1 and "is not a rate" in bad.output
    assert _run("ratelimit", "remove", "mailgun", "--db-url", db_url).exit_code == 0
    missing = _run("ratelimit", "remove", "mailgun", "--db-url", db_url)
    assert missing.exit_code == 1 and "no rate limit named mailgun" in missing.output


def test_worker_serve_with_a_bad_registry(db_url: str) -> None:
    result = _run("worker", "serve", "no_such_module:jobs", "--db-url", db_url)
    assert result.exit_code == 1 and "cannot import no_such_module" in result.output
    result = _run("worker", "serve", "json:dumps", "--db-url", db_url)
    assert result.exit_code == 1 and "is not a jobkit.Registry" in result.output


@pytest.mark.parametrize("args", [
    ("status",), ("status", "--json"), ("jobs", "list"), ("jobs", "retry", "--dead"), ("schedule", "list"),
    ("ratelimit", "list"), ("secrets", "show"), ("doctor",), ("deploy",), ("deploy", "--check"),
])
def test_a_command_opens_one_connection(args: tuple[str, ...], db_url: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command opens its App once: one connection to jobkit's database, however many API
    functions it calls (and one to pg_cron's database, when that is another one, as here)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    opened: list[str] = []
    connect = psycopg.connect

    def counting(conninfo: str = "", **kwargs: Any) -> Any:
        opened.append(str(kwargs.get("dbname") or conninfo_to_dict(conninfo).get("dbname")))
        return connect(conninfo, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    result = CliRunner().invoke(cli, [*args, "--db-url", db_url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output  # a check may fail here
    ours = conninfo_to_dict(db_url)["dbname"]
    assert opened.count(ours) == 1 and len(opened) == len(set(opened)), (args, opened)
