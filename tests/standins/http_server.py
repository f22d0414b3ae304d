"""A recording HTTP server on 127.0.0.1 for the tests: the worker endpoint pg_net calls."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    base: str
    seen: list[Seen] = field(default_factory=list)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Seen]:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.seen


@contextmanager
def recording_server() -> Iterator[Server]:
    """127.0.0.1 on an ephemeral port: /ok answers 200 JSON, /fail 500, /slow sleeps 1 s first,
    /redirect answers 302 to /ok. Every request is recorded before it is answered."""
    state = Server(base="")

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            route = self.path.split("?", 1)[0]
            if route == "/slow":
                time.sleep(1.0)
            if route == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/ok")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 500 if route == "/fail" else 200
            payload = json.dumps({"path": self.path}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Test", "yes")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Listening(ThreadingHTTPServer):
        request_queue_size = 256  # http.server's 5 makes a batch's later connections wait for a SYN retry (1 s)

    httpd = Listening(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


