"""Hostile NOTIFY payloads: any role that can connect can NOTIFY on the wake channel, so a payload
is data from anyone. A real `--listen` worker is fed, through real pg_notify calls, payloads that
are not wake-ups (deep nesting, numbers beyond float, non-objects, wrong types, huge strings,
bytes the database's encoding cannot decode); it ignores and counts them, /healthz stays truthful,
and new jobs still run."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import httpx
import psycopg
import pytest
from faultkit import count, enqueue, exactly_once, prepare
from jobkit.ops.localdb import LocalCluster
from poll import wait_for
from psycopg import sql as psql
from workers import Worker

HOSTILE = [
    "[" * 5000,  # RecursionError in the JSON decoder
    '{"type": "fault.work", "at": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"type": "fault.work", "at": 1' + "0" * 400 + "}",  # an integer beyond float: OverflowError
    '{"type": "fault.work", "at": 1e999}',  # infinity
    '{"type": "fault.work", "at": NaN}',
    '{"type": "fault.work", "at": -5}',
    '{"type": "fault.work", "at": "soon"}',
    '{"type": "fault.work", "at": true}',
    '{"type": "fault.work", "at": 1' + "1" * 5000 + "}",  # past int's digit limit: ValueError
    '{"type": "' + "x" * 7900 + '"}',
    '{"type": 42}', '{"type": ["fault.work"]}', '{"type": ""}', '{"type": null}', "{}",
    "null", "[]", "42", '"fault.work"', "true", "wake up", "", "{",
]


def _notify(url: str, payloads: list[str]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for payload in payloads:
            conn.execute("select pg_notify('jobkit_wake', %s)", (payload,))


def test_hostile_notify_payloads_leave_a_listening_worker_running_new_jobs(
        fault_url: str, workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    worker = workers(url, "--listen", "--concurrency", "4")
    _notify(url, HOSTILE)
    ids = enqueue(url, 20, seconds=0.01)  # woken by the enqueue's own NOTIFY, after the payloads
    wait_for(lambda: count(url, "status = 'completed'") == len(ids), 30, "new jobs ran after the payloads")
    assert worker.health()["invalid_notifications"] == len(HOSTILE)
    metrics = httpx.get(worker.url + "/metrics", timeout=5).text
    assert f"jobkit_notifications_invalid_total {float(len(HOSTILE))}" in metrics
    assert "jobkit_worker_tasks_down 0.0" in metrics
    verdict = exactly_once(url, ids)
    verdict.report("hostile NOTIFY payloads")
    assert verdict.completed == len(ids) and not verdict.rerun
    health = worker.health()
    assert health["ok"] and health["listener"] == "listening", health
    assert set(health["tasks"].values()) == {"running"}, health  # nothing was restarted either
    assert worker.alive


@pytest.fixture
def ascii_url(restartable: LocalCluster) -> Iterator[str]:
    """A database in SQL_ASCII: NOTIFY carries any byte, which the worker's connection cannot decode."""
    name = f"a_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(restartable.url(), autocommit=True) as conn:
        conn.execute(psql.SQL("create database {} encoding 'SQL_ASCII' template template0 "
                              "lc_collate 'C' lc_ctype 'C'").format(psql.Identifier(name)))
    try:
        yield restartable.url(name)
    finally:
        with psycopg.connect(restartable.url(), autocommit=True) as conn:
            conn.execute(psql.SQL("drop database if exists {} with (force)").format(psql.Identifier(name)))


def test_undecodable_notify_payloads_are_ignored(ascii_url: str, workers: Callable[..., Worker]) -> None:
    url = ascii_url
    prepare(url + "?client_encoding=UTF8")  # jobkit's SQL has non-ASCII text; the worker's connections do not
    worker = workers(url, "--listen", "--concurrency", "4")
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(3):
            conn.execute(r"select pg_notify('jobkit_wake', convert_from('\xe9ff7b'::bytea, 'SQL_ASCII'))")
    ids = enqueue(url, 5, seconds=0.01)
    wait_for(lambda: count(url, "status = 'completed'") == len(ids), 30, "new jobs ran after the payloads")
    health = worker.health()
    assert health["invalid_notifications"] == 3, health
    assert health["ok"] and set(health["tasks"].values()) == {"running"}, health


def test_an_undecodable_payload_drops_nothing_else_of_its_batch(
        ascii_url: str, workers: Callable[..., Worker]) -> None:
    """Notifications committed together reach the worker in one batch: an undecodable payload in it
    is one ignored notification, and the wake-ups and other payloads around it are still handled."""
    url = ascii_url
    prepare(url + "?client_encoding=UTF8")
    worker = workers(url, "--listen", "--concurrency", "4")
    bad = r"select pg_notify('jobkit_wake', convert_from(%s::bytea, 'SQL_ASCII'))"  # distinct: not merged
    with psycopg.connect(url) as conn:  # one transaction: every NOTIFY arrives at its commit
        conn.execute(bad, (r"\xe9ff7b",))
        conn.execute("select jobkit.enqueue('fault.work', %s::jsonb) from generate_series(1, 5)",
                     ('{"seconds": 0.01}',))
        conn.execute(bad, (r"\xe9ff7c",))
        conn.execute("select pg_notify('jobkit_wake', 'not a wake-up')")
        conn.execute(bad, (r"\xe9ff7d",))
    wait_for(lambda: count(url, "status = 'completed'") == 5, 30, "the batch's wake-up ran the jobs")
    health = worker.health()
    assert health["invalid_notifications"] == 4, health  # three undecodable, one not a wake-up
    assert health["ok"] and set(health["tasks"].values()) == {"running"}, health
    assert health["listener"] == "listening", health
