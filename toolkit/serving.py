"""Serving an ASGI app with uvicorn the way the worker and the dashboard need it.

- :func:`bind` takes the port before anything is printed or started: a busy port is one
  :class:`ConfigError` (exit 1), not a URL followed by uvicorn's exit 3.
- Request headers have a deadline. uvicorn has none (``timeout_keep_alive`` only covers the idle time
  between requests, and any byte resets it), so a client trickling a header a byte at a time held a
  connection for as long as it liked. :func:`guarded_protocol` wraps uvicorn's HTTP protocol: a
  connection whose request headers are not complete ``header_timeout`` seconds after it opened (or
  after the first byte of its next request) is closed.
- uvicorn's own lines about malformed requests ("Invalid HTTP request received.") are rate-limited
  like jobkit's refusals (logthrottle.py).
- :func:`read_body` reads a request body up to a limit (None beyond it), so a large body is refused
  without being held in memory.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from .exceptions import ConfigError
from .logthrottle import install, throttled

if TYPE_CHECKING:
    import uvicorn

HEADER_TIMEOUT = 10.0  # seconds a client has to send a request's headers
log = throttled("jobkit.http.refused")


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (not listening yet), or one ConfigError saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        raise _bind_error(host, port, exc) from None
    sock.set_inheritable(True)
    return sock


def _bind_error(host: str, port: int, exc: Exception) -> ConfigError:
    code = getattr(exc, "errno", None)
    if code == errno.EADDRINUSE:
        return ConfigError(f"port {port} on {host} is already in use",
                           hint="stop what is listening there, or pick another --port")
    if code in (errno.EACCES, errno.EPERM):
        return ConfigError(f"not allowed to listen on {host}:{port}",
                           hint="ports below 1024 need privileges: pick a --port of 1024 or more")
    reason = getattr(exc, "strerror", None) or str(exc)
    return ConfigError(f"cannot listen on {host}:{port}: {reason}",
                       hint="check --host (an address of this machine, e.g. 127.0.0.1 or 0.0.0.0)")


def url(host: str, sock: socket.socket) -> str:
    """The http:// URL of a bound socket (its real port, also when 0 was asked for)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}/"


def guarded_protocol(header_timeout: float = HEADER_TIMEOUT) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (httptools or h11, as uvicorn picks) with a header deadline."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class HeaderDeadline(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _deadline: asyncio.TimerHandle | None = None
        _waiting_after: Any = None  # the request cycle current when the deadline was armed

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if self.cycle is not self._waiting_after:
                self._disarm()  # its headers are complete: the request is the app's now

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._waiting_after = self.cycle
            self._deadline = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.cycle is self._waiting_after and not self.transport.is_closing():
                log.warning("closed a connection: request headers not complete within %gs", header_timeout)
                self.transport.close()

    return HeaderDeadline


def server(app: Any, *, header_timeout: float = HEADER_TIMEOUT,
           server_class: type[uvicorn.Server] | None = None, **config: Any) -> uvicorn.Server:
    """A uvicorn Server (or ``server_class``) for ``app`` with the header deadline; ``config`` as
    uvicorn.Config's. Run it on a socket from :func:`bind`: ``server(...).run(sockets=[sock])``."""
    import uvicorn

    built = uvicorn.Config(app, http=guarded_protocol(header_timeout), **config)
    # after Config (it configures uvicorn's loggers); its warnings only: an app's error is never held back
    install(logging.getLogger("uvicorn.error"), below=logging.ERROR)
    return (server_class or uvicorn.Server)(built)


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is (or says it is) longer than ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and len(declared) < 20 and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
