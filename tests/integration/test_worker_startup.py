"""`jobkit worker serve` that cannot start says why in one line with a hint and exits 1 (exit 3 is
reserved for failed checks): no driver warnings, no traceback, no uvicorn banner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from workers import TESTS, free_port


def _serve(app: str, url: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobkit", "worker", "serve", app, "--port", str(port or free_port()),
         "--db-url", url],
        cwd=TESTS / "faults", env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
        timeout=60)


def _one_line(done: subprocess.CompletedProcess[str], error: str) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr
    assert len(lines) == 2 and lines[0].startswith(f"error: {error}") and lines[1].startswith("hint: "), done.stderr
    assert done.stdout == "", done.stdout


@pytest.mark.parametrize(("url", "error"), [
    ("not a url", "invalid database URL"),
    ("postgresql://u:p@localhost:notaport/db", "cannot connect to postgresql://u:***@localhost:notaport/db"),
    ("postgresql://nobody@127.0.0.1:1/nothing", "cannot connect to postgresql://nobody@127.0.0.1:1/nothing"),
])
def test_a_bad_or_unreachable_database_is_one_line(url: str, error: str) -> None:
    _one_line(_serve("fault_handlers:jobs", url), error)


def test_a_password_in_a_bad_url_is_not_shown() -> None:
    done = _serve("fault_handlers:jobs", "postgresql://u:s3cret-pw@127.0.0.1:1/nothing")
    _one_line(done, "cannot connect")
    assert "s3cret-pw" not in done.stderr


@pytest.mark.parametrize(("app", "error"), [
    ("no_such_module:jobs", "cannot import no_such_module"),
    ("fault_handlers:nothing", "fault_handlers:nothing is not a jobkit.Registry"),
    ("fault_handlers", "'fault_handlers' is not MODULE:ATTRIBUTE"),
])
def test_a_missing_handler_module_is_one_line(db_url: str, app: str, error: str) -> None:
    _one_line(_serve(app, db_url), error)


def test_a_busy_port_is_one_line(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("fault_handlers:jobs", db_url, port)
    _one_line(done, f"port {port} on 127.0.0.1 is already in use")
