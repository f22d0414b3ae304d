"""Signed wake-ups: how the database proves a /run request is its own.

The database signs each wake-up with the worker's secret (``jobkit._hmac``, HMAC-SHA256, computed
in SQL) and sends ``X-Jobkit-Signature: t=<unix seconds>,v1=<hex>`` over ``"<t>.<raw body>"``.
The worker accepts a request when a current key matches and ``t`` is within a short window of its
own clock, and refuses a nonce it has already seen. A request read from pg_net's queue (which every
role can read) therefore cannot call the worker again after the window, nor twice within it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "X-Jobkit-Signature"
WINDOW = 60.0  # seconds a signature stays valid after its timestamp
SKEW = 30.0  # seconds a timestamp may be ahead of the worker's clock


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


class Verifier:
    """Checks signatures against the current keys and remembers nonces seen within the window."""

    def __init__(self, window: float = WINDOW, skew: float = SKEW) -> None:
        self.window = window
        self.skew = skew
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> when it expires

    def check(self, header: str | None, body: bytes, keys: Iterable[str],
              now: float | None = None) -> Verdict:
        clock = time.time() if now is None else now
        parsed = _parse(header)
        if parsed is None:
            return Verdict(False, f"missing or malformed {HEADER} header")
        t, given = parsed
        if t < clock - self.window or t > clock + self.skew:
            return Verdict(False, f"signature timestamp outside the {self.window:g}s window")
        if not any(hmac.compare_digest(_mac(k, t, body), given) for k in keys if k):
            return Verdict(False, "signature does not match", stale_keys=True)
        nonce = _nonce(body, given)
        self._forget(clock)
        if nonce in self._seen:
            return Verdict(False, "this signed request was already used")
        self._seen[nonce] = t + self.window
        return Verdict(True)

    def _forget(self, clock: float) -> None:
        while self._seen and next(iter(self._seen.values())) < clock:
            self._seen.popitem(last=False)


def _parse(header: str | None) -> tuple[int, str] | None:
    if not header:
        return None
    fields = dict(part.strip().partition("=")[::2] for part in header.split(","))
    t, given = fields.get("t", ""), fields.get("v1", "")
    if not t.isdigit() or len(given) != 64:
        return None
    return int(t), given.lower()


def _nonce(body: bytes, signature: str) -> str:
    """The body's nonce (every wake-up has one); the signature itself for bodies without."""
    try:
        value = json.loads(body).get("nonce")
    except (ValueError, AttributeError, RecursionError):
        value = None
    return str(value) if value else signature
