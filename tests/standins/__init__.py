"""TEST STAND-INS for Supabase extensions that cannot be installed on the test machines.

- pg_net 0.20.x: ``pg_net.sql`` (schema ``net``: the queue/response tables and http_get/http_post/
  http_delete; net.wake() NOTIFYs ``WAKE_CHANNEL`` at commit) plus ``PgNetStandIn``, which plays
  pg_net's background worker in a thread with its timing (woken at commit, batches of up to
  ``batch_size``, a 1 s pause after each) and an optional fault mode (dropped, timed-out, lost
  requests).
- supabase_vault 0.3.x: ``vault.sql`` (schema ``vault``: secrets, create_secret, update_secret,
  decrypted_secrets; base64 instead of encryption), loaded with ``install_vault(url)``.

Usage::

    from standins import PgNetStandIn, install_vault

    install_vault(url)
    with PgNetStandIn(url) as net:   # start() ... stop()
        ...                          # net.install() first if the database has no `net` schema yet
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from .pgnet_worker import APPLICATION_NAME, PG_NET_VERSION, WAKE_CHANNEL, PgNetStandIn, curl_error

PG_NET_SQL = Path(__file__).with_name("pg_net.sql")
VAULT_SQL = Path(__file__).with_name("vault.sql")


def install_pg_net(url: str) -> None:
    """(Re)create the pg_net stand-in schema `net` (drops an existing one). No worker is started."""
    PgNetStandIn(url).install()


def install_vault(url: str) -> None:
    """(Re)create the Vault stand-in schema `vault` (drops an existing one and its secrets)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(VAULT_SQL.read_text())  # a trusted file


__all__ = [
    "APPLICATION_NAME",
    "PG_NET_SQL",
    "PG_NET_VERSION",
    "VAULT_SQL",
    "WAKE_CHANNEL",
    "PgNetStandIn",
    "curl_error",
    "install_pg_net",
    "install_vault",
]
