"""`jobkit secrets`: the worker endpoint's URL and the secret wake-ups are signed with.

Both live where wake() reads them at run time: Supabase Vault when installed
(``vault.decrypted_secrets``), else jobkit's private ``secrets`` table, which only the owner and
service_role can read. The secret is generated inside the database (``rotate_worker_secret()``),
so it never travels as a statement parameter and never reaches a server log; commands show a
fingerprint only, and the worker reads it from the database. Rotating keeps the previous secret
valid for a grace period, so running workers see no failed wake-up.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from ..config import Settings
from ..connector import Database, Session, redact
from ..exceptions import ConfigError
from ..queries import queries

URL, SECRET = "worker_url", "worker_secret"
MIN_SECRET = 32


@dataclass(frozen=True)
class SecretsInfo:
    """What is stored, shown safely."""

    store: str  # "vault" or "table"
    url: str | None
    fingerprint: str | None  # of the signing secret
    length: int = 0
    previous_valid: bool = False  # a rotated-out secret is still accepted (grace period)


def fingerprint(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:12]


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in url for c in "\r\n\t "):
        raise ConfigError(
            f"worker URL {redact(url)!r} is not an http(s) URL",
            hint="give the worker's POST /run endpoint, e.g. https://worker.example.com/run",
        )
    return url


def check_secret(secret: str) -> str:
    if len(secret) < MIN_SECRET or not secret.isprintable() or secret != secret.strip():
        raise ConfigError(
            f"the worker secret must be at least {MIN_SECRET} printable characters with no surrounding "
            "whitespace or line breaks",
            hint="omit --secret-stdin to let the database generate a strong one")
    return secret


def set_secrets(db: Database, settings: Settings, *, url: str | None, secret: str | None = None,
                rotate: bool = False, grace: timedelta = timedelta(minutes=10)) -> tuple[SecretsInfo, bool]:
    """Store the URL and/or the secret (``secret`` given: that one, which then travels as a
    parameter; else generated in the database when none is stored yet, or on ``rotate``).
    Returns what is stored and whether a secret was generated."""
    if url is not None:
        check_url(url)
    if secret is not None:
        check_secret(secret)
    q = queries(settings.schema)
    with db.session() as session, session.transaction():
        session.execute(q["quiet_logging"])
        if url is not None:
            session.execute(q["secret_put"], {"name": URL, "value": url})
        generated = secret is None and (rotate or _get(session, settings, SECRET) is None)
        if generated:
            session.execute(q["secret_rotate"], {"grace": grace})
        elif secret is not None:
            session.execute(q["secret_replace"], {"value": secret, "grace": grace})
    return show(db, settings), generated


def show(db: Database, settings: Settings) -> SecretsInfo:
    with db.session() as session:
        secret = _get(session, settings, SECRET)
        url = _get(session, settings, URL)
        row = session.one(queries(settings.schema)["secrets_state"]) or {}
    return SecretsInfo("vault" if row.get("vault") else "table", redact(url) if url else None,
                       fingerprint(secret) if secret else None, len(secret or ""),
                       bool(row.get("previous_valid")))


def _get(session: Session, settings: Settings, name: str) -> str | None:
    value = session.scalar(queries(settings.schema)["secret_get"], {"name": name})
    return str(value) if value is not None else None
