"""Signed wake-ups: how the database proves a /run request is its own.

The database signs each wake-up with the worker's secret (``jobkit._hmac``, HMAC-SHA256, computed
in SQL) and sends ``X-Jobkit-Signature: t=<unix seconds>,v1=<hex>`` over ``"<t>.<raw body>"``.
The worker accepts a request when a current key matches and ``t`` is within a short window of its
own clock. A request read from pg_net's queue (which every role can read) therefore cannot call
the worker after the window. Within the window, each signed request is accepted once by the whole
fleet: the worker consumes the request's signature in the database (``jobkit.consume_wake``, a
primary key), so every other worker process, and the same one after a restart, sees it used; a
repeated delivery is answered as a harmless duplicate (2xx, nothing done).

Every header value is data: whatever it holds, ``check`` answers with a Verdict, never raises.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "X-Jobkit-Signature"
WINDOW = 60.0  # seconds a signature stays valid after its timestamp
SKEW = 30.0  # seconds a timestamp may be ahead of the worker's clock
MAX_HEADER = 512  # characters; a real header has about 80
_T = re.compile(r"[0-9]{1,12}")  # ASCII digits only ('²'.isdigit() is True), and no 5,000 of them
_V1 = re.compile(r"[0-9a-fA-F]{64}")


def sign(secret: str, body: bytes, t: int | None = None) -> str:
    """The header value for ``body`` signed with ``secret`` at ``t`` (default: now)."""
    stamp = int(time.time()) if t is None else t
    return f"t={stamp},v1={_mac(secret, stamp, body)}"


def signed_headers(secret: str, body: bytes, t: int | None = None) -> dict[str, str]:
    """The headers of a /run request the way the database sends it (for tests and manual calls)."""
    return {HEADER: sign(secret, body, t), "Content-Type": "application/json"}


def _mac(secret: str, t: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""  # why not, for the 401 body and the log (never a secret)
    stale_keys: bool = False  # no key matched: the caller may refresh its keys and verify again
    nonce: str = ""  # what makes this request unique (its signature): consume it once
    expires: float = 0.0  # Unix time after which the window refuses it anyway


class Verifier:
    """Checks signatures against the current keys and the time window. Whether the request was
    used already is the database's to say (``jobkit.consume_wake``): the fleet shares it."""

    def __init__(self, window: float = WINDOW, skew: float = SKEW) -> None:
        self.window = window
        self.skew = skew

    def check(self, header: str | None, body: bytes, keys: Iterable[str],
              now: float | None = None) -> Verdict:
        clock = time.time() if now is None else now
        parsed = parse(header)
        if parsed is None:
            return Verdict(False, f"missing or malformed {HEADER} header")
        t, given = parsed
        if t < clock - self.window or t > clock + self.skew:
            return Verdict(False, f"signature timestamp outside the {self.window:g}s window")
        if not any(hmac.compare_digest(_mac(k, t, body), given) for k in keys if k):
            return Verdict(False, "signature does not match", stale_keys=True)
        return Verdict(True, nonce=given, expires=t + self.window)


def parse(header: str | None) -> tuple[int, str] | None:
    """(t, v1 in lower case) of a well-formed header; None for anything else, whatever it holds."""
    if not header or len(header) > MAX_HEADER:
        return None
    fields = dict(part.strip().partition("=")[::2] for part in header.split(","))
    t, given = fields.get("t", ""), fields.get("v1", "")
    if not _T.fullmatch(t) or not _V1.fullmatch(given):
        return None
    return int(t), given.lower()
