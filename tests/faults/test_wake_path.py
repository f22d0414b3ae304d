"""Faults on the wake path: a flood of concurrent /run calls (the claim window must hold), pg_net
dropping, timing out and losing wake-ups (the stand-in's fault mode), and the signing secret
rotated while wake-ups flow (no wake-up may be refused)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable

import httpx
import psycopg
from faultkit import Ticker, count, enqueue, exactly_once, prepare, wire_pg_net
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.worker.secrets import set_secrets
from jobkit.worker.signing import signed_headers
from poll import wait_for
from standins import PgNetStandIn
from workers import SECRET, Worker, free_port

WINDOW = 32  # --concurrency 16 --prefetch 2


class Sampler:
    """Samples how many jobs are processing, every few milliseconds, in a thread."""

    def __init__(self, url: str) -> None:
        self.url, self.peak, self.samples = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute("select count(*) from jobkit.jobs where status = 'processing'").fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)
                self.samples += 1
                time.sleep(0.002)


async def _flood(base: str, calls: int) -> list[int]:
    """``calls`` signed /run calls at once: plain wake-ups, bounded one-off drains and synchronous
    drains, so that many drains claim at the same time."""
    async def one(client: httpx.AsyncClient, i: int) -> int:
        body: dict[str, object] = {"type": "fault.work", "nonce": uuid.uuid4().hex}
        path = "/run"
        if i % 5 in (1, 2):
            body["max_jobs"] = 40
        elif i % 5 == 3:
            path = "/run?wait=1"
            body["budget_ms"] = 2000
        raw = json.dumps(body).encode()
        response = await client.post(base + path, content=raw, headers=signed_headers(SECRET, raw))
        return response.status_code

    limits = httpx.Limits(max_connections=calls, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        return list(await asyncio.gather(*(one(client, i) for i in range(calls))))


def test_500_concurrent_runs_never_exceed_the_window(fault_url: str, workers: Callable[..., Worker]) -> None:
    url = fault_url
    prepare(url)
    worker = workers(url, "--concurrency", "16", "--prefetch", "2")
    with psycopg.connect(url, autocommit=True) as conn:  # enqueued without a wake-up: the flood wakes
        conn.execute("alter table jobkit.jobs disable trigger jobs_wake_on_insert")
    ids = enqueue(url, 3000, seconds=0.02)
    with Sampler(url) as sampler:
        statuses = asyncio.run(_flood(worker.url, 500))
        wait_for(lambda: count(url, "status = 'completed'") == len(ids), 60, "the backlog drained")
    assert sorted(set(statuses)) <= [200, 202], statuses
    verdict = exactly_once(url, ids)
    verdict.report(f"500 concurrent /run calls: peak {sampler.peak} processing (window {WINDOW}, "
                   f"{sampler.samples} samples)")
    assert verdict.completed == len(ids) and not verdict.rerun
    assert 0 < sampler.peak <= WINDOW


def test_pg_net_drops_times_out_and_loses_wake_ups(fault_url: str, workers: Callable[..., Worker]) -> None:
    """Wake-ups dropped, timed out (delivered late or not) and lost by pg_net: with no lingering,
    each job depends on some wake-up; the cron wake-up (a ticker every 2 s here) and the next
    wake-ups still run every job, once."""
    url = fault_url
    port = free_port()
    wire_pg_net(url, f"http://127.0.0.1:{port}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("update jobkit.settings set value = '500' where key = 'wake_timeout_ms'")
    workers(url, "--concurrency", "8", "--linger", "0s", port=port)
    net = PgNetStandIn(url, drop_rate=0.25, timeout_rate=0.25, lose_rate=0.15, seed=7)
    ids = []
    with net, Ticker(url, period=2.0), Database(url).session() as session:
        manager = Lifecycle(session, "jobkit")
        for i in range(40):
            ids.append(manager.enqueue(NewJob("fault.work", {"seconds": 0.01, "i": i})))
            time.sleep(0.1)
        took = wait_for(lambda: count(url, "status = 'completed'") == len(ids), 30, "every job running")
    stats = dict(net.stats)
    verdict = exactly_once(url, ids)
    verdict.report(f"pg_net faults {stats}: drained {took:.1f}s after the last enqueue")
    assert verdict.completed == len(ids) and not verdict.rerun
    assert stats["dropped"] and stats["timed_out"] and stats["lost"]  # the faults did happen


def test_rotating_the_secret_while_wake_ups_flow_refuses_none(
    fault_url: str, workers: Callable[..., Worker]
) -> None:
    """The worker reads its keys from the database (no fixed secret): three rotations while jobs
    are enqueued one by one; every wake-up is delivered, none answered 401."""
    url = fault_url
    port = free_port()
    PgNetStandIn(url).install()
    settings = prepare(url)
    set_secrets(Database(url), settings, url=f"http://127.0.0.1:{port}/run")
    workers(url, "--concurrency", "8", port=port, env={"JOBKIT_WORKER_SECRET": ""})
    ids = []
    with PgNetStandIn(url), Database(url).session() as session:
        manager = Lifecycle(session, "jobkit")
        for i in range(90):
            ids.append(manager.enqueue(NewJob("fault.work", {"seconds": 0.01})))
            if i % 30 == 15:
                set_secrets(Database(url), Settings(db_url=url), url=None, rotate=True)
            time.sleep(0.03)
        wait_for(lambda: count(url, "status = 'completed'") == len(ids), 30, "every job running")
        wait_for(lambda: _settled(session), 15, "every wake-up answered")
        outcomes = {r["o"]: r["n"] for r in session.all(
            "select coalesce(outcome, 'open') as o, count(*) as n from jobkit.wakeups group by 1")}
        refused = session.scalar("select count(*) from jobkit.wakeups where status_code = 401")
        failures = session.all("select status_code, error from jobkit.wakeups where outcome <> 'delivered'")
    verdict = exactly_once(url, ids)
    verdict.report(f"3 rotations under load: wake-ups {outcomes}")
    assert refused == 0 and set(outcomes) == {"delivered"}, failures
    assert verdict.completed == len(ids)


def _settled(session: object) -> bool:
    from jobkit.connector import Session

    assert isinstance(session, Session)
    session.scalar("select jobkit.reconcile_wakeups()")
    return not session.scalar("select count(*) from jobkit.wakeups where outcome is null")
