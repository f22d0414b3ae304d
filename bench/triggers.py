"""`python -m bench.triggers [--rows N] [--statements N] [--rounds N]`: what a row trigger costs the
inserting transaction (issue 24).

Its own PostgreSQL (fsync and synchronous_commit on, bench/cluster.py). One app table,
``events (id bigint primary key, user_id int, email text, body text)``, in five fresh databases:

- ``none``: no trigger;
- ``jobkit``: a declared row trigger ([triggers.welcome], payload ["id", "email"]) deployed by
  jobkit: one statement-level insert into its inbox (row_inbox, 0026) per statement and one wake-up
  through the engine's path, by NOTIFY (pg_net absent); the rows become jobs later, when the type is
  claimed or the stuck sweep runs (not measured here: off the inserting transaction);
- ``jobkit-nowake``: the same with ``wake_on_insert = false`` for the job type: the trigger and its
  inbox insert alone, without the engine's per-transaction wake-up path (sql/functions/70_wake.sql);
- ``jobkit-emit``: the same trigger with ``emit = "user.created"`` instead of a type (issue 25): one
  ``_emit_many`` per statement, an event row per row, no subscribers;
- ``webhook``: a Supabase Database Webhook: FOR EACH ROW, ``net.http_post`` with the row as body,
  on the pg_net stand-in (tests/standins/pg_net.sql; its worker is not running, so requests only
  queue up, as they do in the inserting transaction with the real pg_net).

Single-row: blocks of ``--rows`` autocommit INSERTs of one row each (a commit each). Bulk: blocks
of ``--statements`` autocommit INSERTs of 1,000 rows each. The four databases' blocks alternate,
``--rounds`` times, in a rotating order; the table shows each variant's median rows/s over its
blocks and its cost relative to ``none``. Prints markdown for
docs/BENCHMARKS.md ("Issue 24: row triggers").
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from jobkit.config import parse_settings
from jobkit.connector import Database
from jobkit.schema.deploy import DeployOptions, deploy

from .cluster import BenchCluster

ROOT = Path(__file__).resolve().parents[1]
TABLE = "create table public.events (id bigint primary key, user_id int, email text, body text)"
WEBHOOK = """
create function public.events_webhook() returns trigger language plpgsql as $$
begin
    perform net.http_post(url := 'http://127.0.0.1:9/hooks/welcome',
                          body := jsonb_build_object('type', TG_OP, 'table', TG_TABLE_NAME,
                                                     'record', to_jsonb(new)),
                          timeout_milliseconds := 5000);
    return new;
end $$;
create trigger events_webhook after insert on public.events
    for each row execute function public.events_webhook()
"""
TRIGGER = {"welcome": {"table": "public.events", "on": ["insert"], "type": "send_welcome",
                       "payload": ["id", "email"]}}
EMIT = {"welcome": {"table": "public.events", "on": ["insert"], "emit": "user.created",
                    "payload": ["id", "email"]}}
VARIANTS = ("none", "jobkit", "jobkit-nowake", "jobkit-emit", "webhook")
ROW = "insert into events (id, user_id, email, body) values (%s, %s, %s, 'hello')"
BULK = ("insert into events (id, user_id, email, body) select g, g, 'u' || g || '@example.com', 'hello' "
        "from generate_series(%s::bigint, %s::bigint) g")


def prepare(url: str, variant: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TABLE)
    if variant.startswith("jobkit"):
        types = {"send_welcome": {"wake_on_insert": False}} if variant == "jobkit-nowake" else {}
        triggers = EMIT if variant == "jobkit-emit" else TRIGGER
        deploy(Database(url), parse_settings({"db_url": url, "triggers": triggers, "types": types}),
               DeployOptions(schedules=False), echo=lambda _m: None)
    elif variant == "webhook":
        sys.path.insert(0, str(ROOT / "tests"))
        from standins import PgNetStandIn  # noqa: PLC0415 - the tests' stand-in, on demand

        PgNetStandIn(url).install()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(WEBHOOK)


Conn = psycopg.Connection[tuple[object, ...]]


def single(conn: Conn, start: int, rows: int) -> float:
    """Rows per second of ``rows`` one-row autocommit inserts."""
    began = time.perf_counter()
    for i in range(start, start + rows):
        conn.execute(ROW, (i, i, f"u{i}@example.com"))
    return rows / (time.perf_counter() - began)


def bulk(conn: Conn, start: int, statements: int) -> float:
    """Rows per second of ``statements`` autocommit inserts of 1,000 rows."""
    began = time.perf_counter()
    for k in range(statements):
        low = start + k * 1000
        conn.execute(BULK, (low, low + 999))
    return statements * 1000 / (time.perf_counter() - began)


def check(url: str, variant: str, expected: int) -> None:
    """The trigger did its work: one job, event or queued request per row."""
    # staged rows (jobkit.row_inbox, 0026) become jobs off the inserting transaction: both count
    jobs = "select (select count(*) from jobkit.jobs) + (select count(*) from jobkit.row_inbox)"
    query = {"jobkit": jobs, "jobkit-nowake": jobs, "jobkit-emit": "select count(*) from jobkit.events",
             "webhook": "select count(*) from net.http_request_queue",
             "none": "select count(*) from events"}[variant]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    got = int(row[0]) if row else 0
    if got != expected:
        raise SystemExit(f"{variant}: {got} rows of work, expected {expected}")


def measure(bench: BenchCluster, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """The databases side by side; blocks of each case alternate between them (in a rotating
    order), so that a shared machine's drift (other processes' disk flushes) hits all alike."""
    results: dict[str, dict[str, list[float]]] = {v: {"single": [], "bulk": []} for v in VARIANTS}
    cases: list[tuple[str, Callable[[Conn, int, int], float], int]] = [
        ("single", single, args.rows), ("bulk", bulk, args.statements)]
    with contextlib.ExitStack() as stack:
        urls = {v: stack.enter_context(bench.database("jobkit")) for v in VARIANTS}
        for variant, url in urls.items():
            prepare(url, variant)
        conns = {v: stack.enter_context(psycopg.connect(url, autocommit=True)) for v, url in urls.items()}
        done = dict.fromkeys(VARIANTS, 0)
        for variant in VARIANTS:  # warm-up, not counted: plans, the trigger function's compile, caches
            for case, run, _n in cases:
                run(conns[variant], 1 + done[variant], 10)
                done[variant] += 10 if case == "single" else 10_000
        for round_ in range(args.rounds):
            order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
            for case, run, n in cases:
                for variant in order:
                    results[variant][case].append(run(conns[variant], 1 + done[variant], n))
                    done[variant] += n if case == "single" else n * 1000
            print(f"round {round_ + 1}: " + "; ".join(
                f"{v} single {results[v]['single'][-1]:,.0f} bulk {results[v]['bulk'][-1]:,.0f} rows/s"
                for v in VARIANTS), file=sys.stderr)
        for variant, url in urls.items():
            check(url, variant, done[variant])
    return results


def report(results: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> str:
    base = {c: statistics.median(results["none"][c]) for c in ("single", "bulk")}
    lines = ["| trigger | single-row inserts (rows/s) | cost vs none | 1,000-row statements (rows/s) "
             "| cost vs none |", "|---|---:|---:|---:|---:|"]
    for variant in VARIANTS:
        single_rate, bulk_rate = (statistics.median(results[variant][c]) for c in ("single", "bulk"))
        lines.append(f"| {variant} | {single_rate:,.0f} | {_cost(base['single'], single_rate)} | "
                     f"{bulk_rate:,.0f} | {_cost(base['bulk'], bulk_rate)} |")
    lines.append("")
    lines.append(f"Medians of {args.rounds} rounds; in each, a block of {args.rows:,} one-row autocommit "
                 f"INSERTs and a block of {args.statements} INSERTs of 1,000 rows per variant, the variants' "
                 "blocks alternating in a rotating order. Cost = time per row relative to no trigger "
                 "(x1.30 = 30% more).")
    return "\n".join(lines)


def _cost(base: float, rate: float) -> str:
    return f"x{base / rate:.2f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.triggers", description=__doc__)
    ap.add_argument("--rows", type=int, default=300, help="one-row inserts per block (default 300)")
    ap.add_argument("--statements", type=int, default=5, help="1,000-row inserts per block (default 5)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds of blocks (default 15)")
    args = ap.parse_args(argv)
    with BenchCluster(echo=lambda m: print(m, file=sys.stderr)) as bench:
        print(report(measure(bench, args), args))


if __name__ == "__main__":
    main()
