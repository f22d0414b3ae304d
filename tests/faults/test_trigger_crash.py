"""Issue 24's crash test: a Database-Webhook-style trigger (net.http_post per row, as Supabase's
Database Webhooks do) against jobkit's row trigger, both committed, then `pg_ctl stop -m immediate`
before pg_net's worker sends anything, then a restart. pg_net keeps its queue in an unlogged table,
which a crash restart empties: the webhook side loses every queued request. jobkit's jobs are in a
logged table written in the same transaction as the rows (row_inbox, 0026: staged, made into jobs by
the claim or the stuck sweep): every one is there after the restart, and a real worker then runs
each exactly once. Both counts are printed ([faults] lines)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from faultkit import Ticker, count, exactly_once, prepare
from jobkit.config import parse_settings
from jobkit.connector import Database
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from poll import wait_for
from psycopg import sql as psql
from standins import PgNetStandIn
from workers import Worker

BURST = 500
USERS = "create table public.users (id bigint primary key, email text not null)"
WEBHOOK = """
create function public.users_webhook() returns trigger language plpgsql as $$
begin
    perform net.http_post(url := 'http://127.0.0.1:9/hooks/welcome',
                          body := jsonb_build_object('type', 'INSERT', 'table', 'users', 'record', to_jsonb(new)),
                          timeout_milliseconds := 5000);
    return new;
end $$;
create trigger users_webhook after insert on public.users for each row execute function public.users_webhook();
"""


def _burst(url: str) -> None:
    """BURST sign-ups, committed one transaction each."""
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(BURST):
            conn.execute("insert into public.users (id, email) values (%s, %s)", (i, f"user{i}@example.com"))


def test_a_crash_before_pg_net_sends_loses_the_webhooks_but_no_job(
        restartable: LocalCluster, fault_url: str, workers: Callable[..., Worker]) -> None:
    webhook_db = fault_url.rsplit("/", 1)[0] + "/" + Database(fault_url).dbname + "_hook"
    with psycopg.connect(restartable.url(), autocommit=True) as conn:
        conn.execute(psql.SQL("create database {}").format(psql.Identifier(Database(webhook_db).dbname)))
    try:
        # the webhook side: pg_net (stand-in; its worker is not running, as if it had not sent yet)
        PgNetStandIn(webhook_db).install()
        with psycopg.connect(webhook_db, autocommit=True) as conn:
            conn.execute(USERS)
            conn.execute(WEBHOOK)
        # jobkit's side: the same table, a declared row trigger
        prepare(fault_url)
        with psycopg.connect(fault_url, autocommit=True) as conn:
            conn.execute(USERS)
        settings = parse_settings({"db_url": fault_url, "triggers": {"welcome": {
            "table": "public.users", "on": ["insert"], "type": "fault.work", "payload": ["id", "email"]}}})
        deploy(Database(fault_url), settings, DeployOptions(schedules=False), echo=lambda _m: None)

        _burst(webhook_db)
        _burst(fault_url)
        queued = _one(webhook_db, "select count(*) from net.http_request_queue")
        assert queued == BURST
        restartable.restart("immediate")

        webhooks_left = _one(webhook_db, "select count(*) from net.http_request_queue")
        rows_left = _one(webhook_db, "select count(*) from public.users")
        staged = _one(fault_url, "select count(*) from jobkit.row_inbox where name = 'welcome'")
        moved = _one(fault_url, "select jobkit.move_row_inbox()")  # as the type's claim or the stuck sweep
        jobs = _one(fault_url, "select count(*) from jobkit.jobs where source->>'trigger' = 'welcome'")
        print(f"[faults] crash before send: webhook side {webhooks_left}/{BURST} requests left "
              f"({rows_left} rows committed); jobkit side {staged}/{BURST} rows staged, "
              f"{jobs}/{BURST} jobs after the move")
        assert rows_left == BURST and webhooks_left == 0
        assert staged == moved == jobs == BURST

        with psycopg.connect(fault_url, autocommit=True) as conn:
            ids = [r[0] for r in conn.execute("select id from jobkit.jobs where type = 'fault.work'").fetchall()]
        workers(fault_url, "--concurrency", "8", "--listen")
        with Ticker(fault_url):
            wait_for(lambda: count(fault_url, "status = 'completed'") == BURST, 120, "every job completed")
        verdict = exactly_once(fault_url, ids)
        verdict.report("row trigger after a crash restart")
        assert verdict.completed == BURST and not verdict.rerun
        assert all(n == 1 for n in verdict.runs.values()) and len(verdict.runs) == BURST
    finally:
        with psycopg.connect(restartable.url(), autocommit=True) as conn:
            conn.execute(psql.SQL("drop database if exists {} with (force)").format(
                psql.Identifier(Database(webhook_db).dbname)))


def _one(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0
