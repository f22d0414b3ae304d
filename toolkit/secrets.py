"""`jobkit secrets`: the worker endpoint's URL and bearer token, stored where wake() reads them.

Supabase Vault when installed (``vault.decrypted_secrets``), else jobkit's private ``secrets``
table, which only the owner and service_role can read. The token is generated when not given and
is never printed: commands show a fingerprint, and the worker reads the token from the database.
Rotating it changes no schedule, since wake() reads both values at run time.
"""

from __future__ import annotations

import hashlib
import secrets as random_secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from .config import Settings
from .connector import Database, Session, redact
from .exceptions import ConfigError
from .queries import queries

URL, TOKEN = "worker_url", "worker_token"


@dataclass(frozen=True)
class SecretsInfo:
    """What is stored, shown safely."""

    store: str  # "vault" or "table"
    url: str | None
    token_fingerprint: str | None
    token_length: int = 0


def fingerprint(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"worker URL {redact(url)!r} is not an http(s) URL",
            hint="give the worker's POST /run endpoint, e.g. https://worker.example.com/run",
        )
    return url


def set_secrets(db: Database, settings: Settings, *, url: str | None, token: str | None,
                rotate: bool = False) -> tuple[SecretsInfo, bool]:
    """Store the URL and/or token; generate a token when none is stored yet (or ``rotate``).
    Returns what is stored and whether a token was generated."""
    if url is not None:
        check_url(url)
    if token is not None and len(token) < 16:
        raise ConfigError("the worker token is shorter than 16 characters",
                          hint="omit --token-stdin to let jobkit generate a strong one")
    with db.session() as session:
        generated = token is None and (rotate or _get(session, settings, TOKEN) is None)
        if generated:
            token = random_secrets.token_urlsafe(32)
        with session.transaction():
            session.execute(queries(settings.schema)["quiet_logging"])
            for name, value in ((URL, url), (TOKEN, token)):
                if value is not None:
                    _put(session, settings, name, value)
        return _info(session, settings), generated


def show(db: Database, settings: Settings) -> SecretsInfo:
    with db.session() as session:
        return _info(session, settings)


def worker_token(session: Session, settings: Settings) -> str | None:
    """The token the worker endpoint must see in ``Authorization: Bearer``."""
    return _get(session, settings, TOKEN)


def _info(session: Session, settings: Settings) -> SecretsInfo:
    token = _get(session, settings, TOKEN)
    url = _get(session, settings, URL)
    return SecretsInfo(_store(session, settings), redact(url) if url else None,
                       fingerprint(token) if token else None, len(token or ""))


def _store(session: Session, settings: Settings) -> str:
    return "vault" if session.scalar(queries(settings.schema)["vault_available"]) else "table"


def _get(session: Session, settings: Settings, name: str) -> str | None:
    value = session.scalar(queries(settings.schema)["secret_get"], {"name": name})
    return str(value) if value is not None else None


def _put(session: Session, settings: Settings, name: str, value: str) -> None:
    q = queries(settings.schema)
    if _store(session, settings) == "table":
        session.execute(q["table_secret_set"], {"name": name, "value": value})
        return
    vault_name = f"{settings.schema}_{name}"
    secret_id = session.scalar(q["vault_secret_id"], {"name": vault_name})
    if secret_id is None:
        session.execute(q["vault_create"], {"value": value, "name": vault_name,
                                            "description": f"jobkit {name.replace('_', ' ')}"})
    else:
        session.execute(q["vault_update"], {"id": secret_id, "value": value})
