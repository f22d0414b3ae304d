"""Real `jobkit worker serve` processes for the tests: start, wait until healthy, send signed /run
calls, stop, kill, pause; restarted on the same port, as a supervisor would."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from jobkit.worker.signing import signed_headers
from poll import wait_for

SECRET = "e2e-worker-secret-0a1b2c3d4e5f6a7b8c9d0e1f"
TESTS = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Worker:
    """One `jobkit worker serve` process (``app`` is MODULE:REGISTRY, importable from ``cwd``)."""

    def __init__(self, db_url: str, *args: str, app: str = "e2e_handlers:jobs", cwd: Path = TESTS,
                 port: int | None = None, env: dict[str, str] | None = None, healthy: bool = True) -> None:
        self.db_url, self.args, self.app, self.cwd = db_url, args, app, cwd
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "JOBKIT_WORKER_SECRET": SECRET, "E2E_DB_URL": db_url,
                    "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobkit", "worker", "serve", app, "--port", str(self.port),
             "--db-url", db_url, *args], cwd=cwd, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        if healthy:
            wait_for(self.healthy, 20, "worker did not start")  # with --listen: LISTEN is in place

    def healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any]:
        return dict(httpx.get(self.url + "/healthz", timeout=2).json())

    def run(self, body: dict[str, Any], secret: str | None = SECRET) -> httpx.Response:
        raw = json.dumps({"nonce": uuid.uuid4().hex, **body}).encode()
        headers = signed_headers(secret, raw) if secret else {"Content-Type": "application/json"}
        return httpx.post(self.url + "/run", content=raw, headers=headers, timeout=30)

    def restarted(self) -> Worker:
        """A new process with the same arguments on the same port (the URL the database calls)."""
        return Worker(self.db_url, *self.args, app=self.app, cwd=self.cwd, port=self.port,
                      env={k: v for k, v in self.env.items() if k not in os.environ})

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no shutdown, no release."""
        self.proc.kill()
        self.proc.communicate(timeout=10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, str]:
        """Signal the process and wait; 0 after a graceful stop. (uvicorn re-raises the signal it
        caught once its shutdown is done, so a clean exit after SIGTERM reads as -SIGTERM.)"""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        graceful = "worker stopped" in out and self.proc.returncode in (0, -sig)
        return (0 if graceful else self.proc.returncode or 1), out

    def output(self, timeout: float = 30) -> tuple[int, str]:
        """Wait for the process to exit by itself; its exit code and output."""
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out
