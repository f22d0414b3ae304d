"""`jobkit secrets`: the URL and the signing secret, stored where wake() reads them, generated inside
the database, never printed, never a statement parameter unless the operator brings their own."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from jobkit.cli import cli
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.exceptions import ConfigError, PrerequisiteError
from jobkit.worker.secrets import fingerprint, set_secrets, show

OWN = "operator-chosen-secret-0123456789abcdef"


def _secret(session: Session, name: str = "worker_secret") -> str | None:
    value = session.scalar("select jobkit.secret(%s)", (name,))
    return str(value) if value is not None else None


def test_cli_set_and_show_never_print_the_secret(db_url: str, session: Session) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["secrets", "set", "--url", "https://w.example.com/run", "--db-url", db_url])
    assert result.exit_code == 0, result.output
    secret = _secret(session)
    assert secret is not None and len(secret) == 96
    assert secret not in result.output and fingerprint(secret) in result.output
    assert "jobkit private table" in result.output and "generated in the database" in result.output
    shown = runner.invoke(cli, ["secrets", "show", "--db-url", db_url])
    assert shown.exit_code == 0 and secret not in shown.output
    assert "url:    https://w.example.com/run" in shown.output


def test_generated_once_rotated_on_request_with_a_grace_period(db_url: str, session: Session) -> None:
    db, settings = Database(db_url), Settings(db_url=db_url)
    first, generated = set_secrets(db, settings, url="http://127.0.0.1:8000/run")
    assert generated and first.length == 96 and not first.previous_valid
    again, generated_again = set_secrets(db, settings, url="http://127.0.0.1:9000/run")
    assert not generated_again and again.fingerprint == first.fingerprint
    rotated, _ = set_secrets(db, settings, url=None, rotate=True)
    assert rotated.fingerprint != first.fingerprint and rotated.previous_valid
    assert show(db, settings).url == "http://127.0.0.1:9000/run"
    keys = session.one("select * from jobkit.worker_keys()")
    assert keys is not None and fingerprint(keys["current_secret"]) == rotated.fingerprint
    assert fingerprint(keys["previous_secret"]) == first.fingerprint


def test_generation_sends_no_secret_as_a_parameter(db_url: str, tmp_path: Path, cluster: object) -> None:
    """With every statement logged (parameters included), generating and rotating the secret leaves
    no trace of it in the server log: it is made inside the database."""
    from jobkit.ops.localdb import LocalCluster

    assert isinstance(cluster, LocalCluster)
    log_file = cluster.status().data_dir.parent / "postgres.log"
    start = log_file.stat().st_size
    db = Database(db_url)
    with db.session() as s:
        s.execute("create role jk_owner login")
        s.execute("alter role jk_owner set log_statement = 'all'")
        s.execute("grant all on schema jobkit to jk_owner")
        s.execute("grant all on all tables in schema jobkit to jk_owner")
        s.execute("grant execute on all functions in schema jobkit to jk_owner")
    try:
        owner = Database(db_url.replace("postgres@", "jk_owner@"))
        set_secrets(owner, Settings(db_url=db_url), url="http://w.example.com/run")
        set_secrets(owner, Settings(db_url=db_url), url=None, rotate=True)
        with db.session() as s:
            secrets = [_secret(s), _secret(s, "worker_secret_previous")]
        logged = log_file.read_bytes()[start:].decode(errors="replace")
        assert "rotate_worker_secret" in logged  # statements were logged ...
        assert all(secret and secret not in logged for secret in secrets)  # ... and no secret in them
    finally:
        with db.session() as s:
            s.execute("reassign owned by jk_owner to postgres")
            s.execute("drop owned by jk_owner")
            s.execute("drop role jk_owner")


def test_an_operators_own_secret(db_url: str, session: Session) -> None:
    result = CliRunner().invoke(cli, ["secrets", "set", "--secret-stdin", "--db-url", db_url], input=OWN + "\n")
    assert result.exit_code == 0, result.output
    assert _secret(session) == OWN and OWN not in result.output


@pytest.mark.parametrize(("url", "secret", "message"), [
    ("ftp://x/run", None, r"is not an http\(s\) URL"),
    ("worker/run", None, r"is not an http\(s\) URL"),
    ("http://x/r\nun", None, r"is not an http\(s\) URL"),
    ("http://x/run", "short", "at least 32 printable characters"),
    ("http://x/run", "a" * 40 + "\nb", "at least 32 printable characters"),
])
def test_bad_input_changes_nothing(db_url: str, session: Session, url: str, secret: str | None,
                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        set_secrets(Database(db_url), Settings(db_url=db_url), url=url, secret=secret)
    assert session.scalar("select count(*) from jobkit.secrets") == 0


def test_url_passwords_are_masked(db_url: str) -> None:
    info, _ = set_secrets(Database(db_url), Settings(db_url=db_url),
                          url="https://user:hunter2-secret@w.example.com/run")
    assert info.url is not None and "hunter2-secret" not in info.url


def test_api_roles_cannot_read_secrets(session: Session) -> None:
    session.execute("select jobkit.rotate_worker_secret()")
    for role in ("anon", "authenticated"):
        session.execute("select set_config('role', %s, false)", (role,))
        try:
            for call in ("select jobkit.secret('worker_secret')", "select * from jobkit.worker_keys()",
                         "select jobkit.rotate_worker_secret()"):
                with pytest.raises(PrerequisiteError):
                    session.execute(call)
        finally:
            session.execute("reset role")
