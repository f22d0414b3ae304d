"""A fleet of worker processes behind one URL: a signed wake-up read from pg_net's queue (readable
by every role) and posted to every worker, and again after a restart, is accepted once in all; the
other deliveries, pg_net's own included, are harmless duplicates (2xx), never failed wake-ups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
from faultkit import count, exactly_once, wire_pg_net
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.signing import HEADER
from poll import wait_for
from standins import PgNetStandIn
from workers import Worker, free_port


def _queued(url: str) -> tuple[bytes, dict[str, str]]:
    """The one queued wake-up, as any role can read it from pg_net's queue."""
    with psycopg.connect(url, autocommit=True) as conn:
        [(headers, body)] = conn.execute("select headers, body from net.http_request_queue").fetchall()
    return bytes(body), {HEADER: headers[HEADER], "Content-Type": "application/json"}


def _post_to_all(fleet: list[Worker], body: bytes, headers: dict[str, str]) -> list[tuple[int, Any]]:
    answers = []
    for w in fleet:
        r = httpx.post(w.url + "/run", content=body, headers=headers, timeout=10)
        answers.append((r.status_code, r.json()))
    return answers


def test_a_replayed_wake_up_is_accepted_once_by_a_fleet_of_three(
    fault_url: str, workers: Callable[..., Worker]
) -> None:
    """One fleet (starting three workers is most of this test's time): the same signed request at
    the same moment to every process, many times each (the database's primary key decides, not
    timing); again after a restart; then pg_net's own delivery."""
    url = fault_url
    port = free_port()
    wire_pg_net(url, f"http://127.0.0.1:{port}")  # pg_net calls the fleet's first worker
    fleet = [workers(url, "--linger", "0s", port=port), workers(url, "--linger", "0s"),
             workers(url, "--linger", "0s")]
    net = PgNetStandIn(url)  # installed, not running: the wake-up waits in its queue
    with Database(url).session() as session:
        job = Lifecycle(session, "jobkit").enqueue(NewJob("fault.work", {"seconds": 0.01}))
    body, headers = _queued(url)

    first = asyncio.run(_race(fleet, body, headers))  # an attacker posts it before pg_net does
    accepted = [a for a in first if a[0] == 202]
    assert len(accepted) == 1, first
    assert sorted(a[0] for a in first) == [200] * 14 + [202], first
    assert all(a[1] == {"accepted": False, "duplicate": True} for a in first if a[0] == 200)
    wait_for(lambda: count(url, "status = 'completed'") == 1, 20, "the job ran")

    fleet[1].kill()  # a restart forgets everything a process held in memory
    fleet[1] = workers(url, "--linger", "0s", port=fleet[1].port)
    again = _post_to_all(fleet, body, headers)
    assert [a[0] for a in again] == [200, 200, 200], again

    with net:  # pg_net's own delivery, after all that: a duplicate, and reconciled as delivered
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("select net.wake()")  # pg_net was down at the commit: its next wake sends it
        wait_for(lambda: _settled(url), 15, "pg_net's delivery answered")
    with psycopg.connect(url, autocommit=True) as conn:
        outcomes = conn.execute("select outcome, status_code from jobkit.wakeups").fetchall()
    assert outcomes == [("delivered", 200)]
    verdict = exactly_once(url, [job])
    verdict.report(f"one wake-up posted 18 times to 3 workers and a restart: {len(accepted)} accepted")
    assert verdict.completed == 1 and not verdict.rerun and verdict.runs == {job: 1}


async def _race(fleet: list[Worker], body: bytes, headers: dict[str, str]) -> list[tuple[int, Any]]:
    """Five posts to each worker, all at once."""
    async with httpx.AsyncClient(timeout=10) as client:
        calls = [client.post(w.url + "/run", content=body, headers=headers) for w in fleet for _ in range(5)]
        return [(r.status_code, r.json()) for r in await asyncio.gather(*calls)]


def _settled(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("select jobkit.reconcile_wakeups()")
        row = conn.execute("select count(*) from jobkit.wakeups where outcome is null").fetchone()
        return row is not None and row[0] == 0
