"""`jobkit secrets`: stored where wake() reads them, never printed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, PrerequisiteError
from jobkit.secrets import fingerprint, set_secrets, show, worker_token

TOKEN = "cli-secret-token-aa11bb22cc33"


def test_cli_set_and_show_never_print_the_token(db_url: str, session: Session) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["secrets", "set", "--url", "https://w.example.com/run", "--token-stdin",
                                 "--db-url", db_url], input=TOKEN + "\n")
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output and fingerprint(TOKEN) in result.output
    assert "jobkit private table" in result.output
    shown = runner.invoke(cli, ["secrets", "show", "--db-url", db_url])
    assert shown.exit_code == 0 and TOKEN not in shown.output
    assert "url:   https://w.example.com/run" in shown.output
    assert session.scalar("select jobkit.secret('worker_token')") == TOKEN


def test_a_token_is_generated_once_and_rotated_on_request(db_url: str) -> None:
    db, settings = Database(db_url), Settings(db_url=db_url)
    first, generated = set_secrets(db, settings, url="http://127.0.0.1:8000/run", token=None)
    assert generated and first.token_length >= 40
    again, generated_again = set_secrets(db, settings, url="http://127.0.0.1:9000/run", token=None)
    assert not generated_again and again.token_fingerprint == first.token_fingerprint
    rotated, _ = set_secrets(db, settings, url=None, token=None, rotate=True)
    assert rotated.token_fingerprint != first.token_fingerprint
    assert show(db, settings).url == "http://127.0.0.1:9000/run"
    with db.session() as s:
        assert fingerprint(worker_token(s, settings) or "") == rotated.token_fingerprint


@pytest.mark.parametrize(("url", "token", "message"), [
    ("ftp://x/run", None, r"is not an http\(s\) URL"),
    ("worker/run", None, r"is not an http\(s\) URL"),
    ("http://x/run", "short", "shorter than 16"),
])
def test_bad_input_changes_nothing(db_url: str, session: Session, url: str, token: str | None,
                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        set_secrets(Database(db_url), Settings(db_url=db_url), url=url, token=token)
    assert session.scalar("select count(*) from jobkit.secrets") == 0


def test_url_passwords_are_masked(db_url: str) -> None:
    info, _ = set_secrets(Database(db_url), Settings(db_url=db_url),
                          url="https://user:hunter2-secret@w.example.com/run", token=None)
    assert info.url is not None and "hunter2-secret" not in info.url


def test_api_roles_cannot_read_secrets(session: Session) -> None:
    session.execute("insert into jobkit.secrets values ('worker_token', 'x' || repeat('y', 20))")
    for role in ("anon", "authenticated"):
        session.execute("select set_config('role', %s, false)", (role,))
        try:
            with pytest.raises(PrerequisiteError):
                session.execute("select jobkit.secret('worker_token')")
        finally:
            session.execute("reset role")
