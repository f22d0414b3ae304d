"""Who may use the dashboard, and proof that a POST came from its own pages.

Three modes: ``token`` (a shared operator token), ``jwt`` (a Supabase JWT, HS256 with the project's
JWT secret, whose claims must hold a configured value, e.g. ``role=service_role``), and ``none``,
allowed on a loopback address only. A browser signs in once (POST /login) and gets a session cookie
(HttpOnly, SameSite=Strict) signed with a key derived from the token or JWT secret, so several
dashboard processes accept each other's sessions and changing the secret signs everyone out. API
clients may send ``Authorization: Bearer`` instead.

CSRF: every page carries a token bound to the session (HMAC of the session id); every POST must
return it, in the form body or the ``X-CSRF-Token`` header (never the query string). Cross-site
pages cannot read it, and with no authentication the Host header must be a loopback name, so a
DNS-rebinding page cannot either. A POST whose ``Origin`` header names another site is refused
as well (:func:`same_origin`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import ConfigError

COOKIE = "jobkit_dashboard"
SESSION_SECONDS = 8 * 3600
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class Refused(Exception):
    """The credential is wrong: 401."""


@dataclass(frozen=True)
class Identity:
    actor: str  # who, for the audit log
    session: str  # what the CSRF token is bound to
    bearer: bool = False  # sent Authorization itself: no cross-site page can, so no CSRF token needed


@dataclass(frozen=True)
class AuthConfig:
    token: str | None = None
    jwt_secret: str | None = None
    jwt_claim: str = "role=service_role"  # dotted.path=value the JWT's claims must hold

    @property
    def mode(self) -> str:
        return "token" if self.token else "jwt" if self.jwt_secret else "none"

    def claim(self) -> tuple[list[str], str]:
        path, sep, value = self.jwt_claim.partition("=")
        if not sep or not path.strip() or not value.strip():
            raise ConfigError(f"--jwt-claim {self.jwt_claim!r} is not PATH=VALUE",
                              hint="e.g. role=service_role or app_metadata.jobkit=admin")
        return path.strip().split("."), value.strip()


class Guard:
    """Checks credentials, signs and reads session cookies, makes and checks CSRF tokens."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        secret = config.token or config.jwt_secret
        self._key = (hmac.new(secret.encode(), b"jobkit dashboard session v1", hashlib.sha256).digest()
                     if secret else secrets.token_bytes(32))
        if config.mode == "jwt":
            config.claim()  # a malformed claim fails at start, not at the first login

    @property
    def required(self) -> bool:
        return self.config.mode != "none"

    def login(self, credential: str) -> tuple[Identity, str]:
        """Check a token or JWT; returns the identity and its session cookie value."""
        identity = self._verify(credential.strip())
        expires = int(time.time()) + SESSION_SECONDS
        body = f"{identity.session}.{expires}.{_b64(identity.actor.encode())}"
        return identity, f"{body}.{self._mac(body)}"

    def identify(self, authorization: str | None, cookie: str | None) -> Identity | None:
        """The caller, from a Bearer header or the session cookie; None when neither is valid."""
        if not self.required:
            return Identity("local", "local")
        if authorization and authorization.lower().startswith("bearer "):
            try:
                found = self._verify(authorization[7:].strip())
                return Identity(found.actor, found.session, bearer=True)
            except Refused:
                return None
        return self._from_cookie(cookie) if cookie else None

    def csrf_token(self, identity: Identity) -> str:
        return self._mac(f"csrf.{identity.session}")

    def csrf_ok(self, identity: Identity, token: str | None) -> bool:
        if identity.bearer:
            return True
        return bool(token) and _equal(self.csrf_token(identity), token or "")

    def _verify(self, credential: str) -> Identity:
        if self.config.mode == "token":
            if not hmac.compare_digest(credential.encode(), (self.config.token or "").encode()):
                raise Refused("wrong token")
            return Identity("token", secrets.token_hex(8))
        return self._verify_jwt(credential)

    def _verify_jwt(self, credential: str) -> Identity:
        import jwt

        try:
            claims: dict[str, Any] = jwt.decode(
                credential, self.config.jwt_secret or "", algorithms=["HS256"],
                options={"require": ["exp"], "verify_aud": False})
        except jwt.PyJWTError as exc:
            raise Refused(f"invalid JWT: {exc}") from None
        path, want = self.config.claim()
        found: Any = claims
        for part in path:
            found = found.get(part) if isinstance(found, dict) else None
        if found is None or str(found).lower() != want.lower():
            raise Refused(f"the JWT's {'.'.join(path)} is not {want}")
        actor = str(claims.get("email") or claims.get("sub") or claims.get("role") or "jwt")
        return Identity(f"jwt:{actor}", secrets.token_hex(8))

    def _from_cookie(self, cookie: str) -> Identity | None:
        parts = cookie.split(".")
        if len(parts) != 4:
            return None
        session, expires, actor, mac = parts
        if not _equal(self._mac(f"{session}.{expires}.{actor}"), mac):
            return None
        if not (expires.isascii() and expires.isdigit() and len(expires) < 16) or int(expires) < time.time():
            return None
        try:
            return Identity(base64.urlsafe_b64decode(actor + "=" * (-len(actor) % 4)).decode(), session)
        except (ValueError, UnicodeDecodeError):
            return None

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode(), hashlib.sha256).digest())


def _equal(expected: str, given: str) -> bool:
    """A constant-time comparison that takes any text (hmac.compare_digest raises TypeError on a
    str that is not ASCII: a 500 for a CSRF token or cookie of `é`)."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(origin: str, hosts: list[str]) -> bool:
    """Whether an Origin header names one of ``hosts`` (Host header values, ``name[:port]``; a
    missing port is the origin scheme's default). ``null`` and anything unparsable are not."""
    try:
        parts = urlsplit(origin.strip())
        want = (parts.hostname, parts.port or DEFAULT_PORTS.get(parts.scheme))
    except ValueError:
        return False
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False
    for host in hosts:
        try:
            found = urlsplit(f"//{host}")
            if (found.hostname, found.port or DEFAULT_PORTS[parts.scheme]) == want:
                return True
        except ValueError:
            continue
    return False


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
