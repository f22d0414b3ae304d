"""Emit events from Python: ``jobkit.emit(target, "order.shipped", key="42", data={...})``, and from
asyncio code ``await jobkit.emit_async(target, ...)``. The SQL form is ``jobkit.emit(name, key,
data, id)`` (triggers, RPC, pg_cron; sql/functions/47_waits.sql).

``target`` is what :func:`jobkit.enqueue` takes: a database URL, a Database, a Session, your own
psycopg connection (the event is part of your transaction: it is stored, and wakes its waiters,
only when you commit) or a supabase-py client (the Data API schema's ``emit``). An emit is stored:
waits registered before it are resumed in its transaction, and a wait registered after it still
sees it (latch). Each subscriber type of ``[events."<name>"]`` gets one job per event. ``id``: the
emit's own id (a webhook's event id, say); an emit retried with the same name, key and id is the
same event and does nothing again.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from .enqueue import _async_session, _is_supabase, _session
from .exceptions import ConfigError
from .lifecycle import Lifecycle, Statements

MAX_NAME = 200
MAX_KEY = 1000


def emit(target: Any, name: str, key: str | int | None = None, data: Any = None, *, id: str | None = None,  # noqa: A002
         schema: str = "jobkit", api_schema: str = "jobkit_api") -> int:
    """Store the event ``name`` (with ``key`` and JSON ``data``) and wake what waits for it; returns
    the event's id."""
    text_key, checked_id = check_event(name, key, data, id)
    if _is_supabase(target):
        rows = target.schema(api_schema).rpc("emit", {"p_name": name, "p_key": text_key, "p_data": data,
                                                      "p_id": checked_id}).execute().data
        return int(rows)
    with _session(target) as session:
        return Lifecycle(session, schema).emit(name, text_key, data, checked_id)


async def emit_async(target: str | psycopg.AsyncConnection[Any], name: str, key: str | int | None = None,
                     data: Any = None, *, id: str | None = None, schema: str = "jobkit") -> int:  # noqa: A002
    """:func:`emit` for asyncio: on a URL, or on your AsyncConnection inside your transaction."""
    text_key, checked_id = check_event(name, key, data, id)
    async with _async_session(target) as session:
        return await session.run(Statements(schema).emit(name, text_key, data, checked_id))


def check_event(name: Any, key: Any, data: Any, emit_id: Any) -> tuple[str | None, str | None]:
    """Refuse what the database would refuse, with a hint: the key as text, the id."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or "\x1f" in name or "\x00" in name:
        raise ConfigError(f"an event name must be a string of 1 to {MAX_NAME} characters, got {name!r}",
                          hint='jobkit.emit(db, "order.shipped", key=order_id, data={...})')
    if isinstance(key, bool) or (key is not None and not isinstance(key, str | int)):
        raise ConfigError(f"an event key must be a string or an integer, got {key!r}",
                          hint="pass key=str(order_id)")
    text_key = None if key is None else str(key)
    if text_key is not None and (len(text_key) > MAX_KEY or "\x00" in text_key):
        raise ConfigError(f"an event key must be at most {MAX_KEY} characters, without NUL",
                          hint="use an id, not a document, as the key")
    if emit_id is not None and (not isinstance(emit_id, str) or not 1 <= len(emit_id) <= MAX_KEY
                                or "\x00" in emit_id):
        raise ConfigError(f"an emit's id must be a string of 1 to {MAX_KEY} characters, got {emit_id!r}",
                          hint="pass the id of what caused it (a webhook's event id)")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"an event's data must be JSON: {exc}",
                          hint="pass dicts, lists, strings and numbers") from None
    return text_key, emit_id
