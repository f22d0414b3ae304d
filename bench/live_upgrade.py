"""`python -m bench.live_upgrade [--rows 1000000] [--no-write]`: what deploying 0002..head costs a
live queue.

On its own cluster (fsync on): migration 0001 only, then ``--rows`` jobs in one INSERT ... SELECT
(90% completed, 6% pending in the future, 3% dead, 1% failed), then a load of enqueues (2 sessions)
and claims + completions (2 sessions) that records every operation's latency, then every later
migration applied as `jobkit deploy` applies it (toolkit.schema.migrations: apply, run_outside), the
NOT VALID constraints validated, and a final deploy() (function files, settings). Reports the longest
stall (an enqueue's or claim's latency) during the deploy, its p99, how long each migration took and
the longest stall that overlapped it. Writes the table between the live-upgrade markers of
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import psycopg
from jobkit.config import Settings
from jobkit.connector import Database
from jobkit.exceptions import DeployError
from jobkit.schema.deploy import DeployOptions, deploy
from jobkit.schema.migrations import apply, run_outside, validate_constraints
from jobkit.schema.render import Migration, render_bootstrap, render_migrations, render_unit

from .cluster import BenchCluster
from .common import percentile
from .report import write_section

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- live-upgrade:start -->", "<!-- live-upgrade:end -->"
LOAD_TYPE = "bench.live"
FALLBACK = timedelta(seconds=2)
PAUSE = 0.002  # between one session's operations: a steady load, not a saturating one

FILL = """
insert into jobkit.jobs (type, payload, status, priority, attempts, max_attempts, last_error, result,
                         scheduled_for, started_at, completed_at, created_at, updated_at)
select 'bench.type' || mod(g, 5), jsonb_build_object('n', g, 'tenant', 't' || mod(g, 97)),
       s.status, mod(g, 3), case when s.status = 'pending' then 0 else 1 + mod(g, 3) end, 3,
       case when s.status in ('dead', 'failed') then 'boom ' || g end,
       case when s.status = 'completed' then jsonb_build_object('ok', true) end,
       case when s.status = 'pending' then now() + interval '30 days' else t.at end,
       case when s.status = 'pending' then null else t.at end,
       case when s.status = 'pending' then null else t.at + interval '1 second' end,
       t.at, t.at
from generate_series(1, %(rows)s) g,
     lateral (select case when mod(g, 100) < 90 then 'completed' when mod(g, 100) < 96 then 'pending'
                          when mod(g, 100) < 99 then 'dead' else 'failed' end as status) s,
     lateral (select now() - mod(g, 604800) * interval '1 second' as at) t
"""


#: A recorded attempt for every finished job that took three (about 31% of them): failures, retries,
#: and snoozes, some of them releases by a stopping worker (what 0009 relabels).
ATTEMPTS = """
insert into jobkit.job_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error)
select id, 1, 'bench', created_at, created_at + interval '1 second',
       case when status in ('dead', 'failed') then 'failed' when priority = 1 then 'snoozed' else 'retry' end,
       case when status in ('dead', 'failed') then 'boom'
            when priority = 1 then 'released by a stopping worker' end
from jobkit.jobs where status <> 'pending' and attempts = 3
"""


@dataclass
class Op:
    kind: str
    start: float
    seconds: float
    error: str | None = None


@dataclass
class Load:
    """Sessions that enqueue, and claim + complete, until stopped; every operation timed."""

    url: str
    ops: list[Op] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, enqueuers: int = 2, claimers: int = 2) -> None:
        for n in range(enqueuers):
            self.threads.append(threading.Thread(target=self._loop, args=(self._enqueue, n), daemon=True))
        for n in range(claimers):
            self.threads.append(threading.Thread(target=self._loop, args=(self._claim, n), daemon=True))
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _loop(self, body: Callable[[psycopg.Connection[tuple[object, ...]], int], None], n: int) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=f"bench-load-{n}") as conn:
            while not self.stop.is_set():
                body(conn, n)
                time.sleep(PAUSE)

    def _timed(self, kind: str, run: Callable[[], object]) -> object:
        start = time.perf_counter()
        error, value = None, None
        try:
            value = run()
        except psycopg.Error as exc:
            error = str(exc).splitlines()[0]
        with self.lock:
            self.ops.append(Op(kind, start, time.perf_counter() - start, error))
        return value

    def _enqueue(self, conn: psycopg.Connection[tuple[object, ...]], n: int) -> None:
        self._timed("enqueue", lambda: conn.execute("select jobkit.enqueue(%s, %s::jsonb)",
                                                     (LOAD_TYPE, '{"live": true}')).fetchone())

    def _claim(self, conn: psycopg.Connection[tuple[object, ...]], n: int) -> None:
        rows = self._timed("claim", lambda: conn.execute(
            "select id, attempts from jobkit.claim_jobs(%s, 10, %s, '5 minutes')",
            (LOAD_TYPE, f"bench-{n}")).fetchall())
        if isinstance(rows, list) and rows:
            ids, attempts = [r[0] for r in rows], [r[1] for r in rows]
            self._timed("complete", lambda: conn.execute(
                "select count(*) from jobkit.complete_jobs(%s::uuid[], %s::int[], null)",
                (ids, attempts)).fetchone())


@dataclass
class Step:
    label: str
    start: float
    seconds: float


# A database at 0001 as jobkit deployed it then, functions included (issue 22 moved them from the
# migrations to sql/functions/, which deploy applies at the end): the load runs from the start.
FIRST = ROOT / "tests" / "fixtures" / "prerecut" / "96ca538" / "0001_baseline.sql"


def prepare(url: str, rows: int) -> None:
    settings = Settings(db_url=url)
    text = FIRST.read_text(encoding="utf-8")
    with Database(url).session() as s, s.transaction():
        s.script(render_bootstrap(settings) + text)
        s.execute("insert into jobkit.schema_migrations (version, name, checksum) "
                  "values ('0001', 'baseline', %s)", (hashlib.sha256(text.encode()).hexdigest(),))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL, {"rows": rows})
        conn.execute(ATTEMPTS)
        conn.execute("vacuum analyze jobkit.jobs")
        conn.execute("vacuum analyze jobkit.job_attempts")


def upgrade(url: str, echo: Callable[[str], None], extra: list[Path]) -> list[Step]:
    """0002..head as deploy applies them, then VALIDATE, then a whole deploy() (the rest of it)."""
    settings, options = Settings(db_url=url), DeployOptions(schedules=False, extra_migrations=extra)
    steps: list[Step] = []

    def timed(label: str, run: Callable[[], object]) -> None:
        start = time.perf_counter()
        run()
        steps.append(Step(label, start, time.perf_counter() - start))
        echo(f"  {label}: {steps[-1].seconds:.2f} s")

    timeout, retry = options.lock_timeout, options.retry
    with Database(url).session() as s:
        for m in render_migrations(settings, extra)[1:]:
            def one(m: Migration = m, timeout: timedelta = timeout) -> None:
                apply(s, settings, m, lock_timeout=timeout, retry=retry, echo=echo)
                run_outside(s, settings, m, lock_timeout=timeout, retry=retry, echo=echo)

            tried = time.perf_counter()
            try:
                timed(f"{m.version}_{m.name}", one)
            except DeployError as exc:
                # Lost to the load every time (a lock-order deadlock with claims, which a lock_timeout
                # below deadlock_timeout always loses): say so, then apply it with FALLBACK, above
                # deadlock_timeout, so PostgreSQL's deadlock detector cancels the claim instead.
                steps.append(Step(f"{m.version}_{m.name}: FAILED with the defaults ({exc.message})",
                                  tried, time.perf_counter() - tried))
                echo(f"  {steps[-1].label}")
                timed(f"{m.version}_{m.name}, again with lock_timeout {FALLBACK.total_seconds():g} s",
                      lambda m=m: one(m, FALLBACK))
        timed("validate NOT VALID constraints",
              lambda: validate_constraints(s, settings, lock_timeout=timeout, retry=retry, echo=echo))
    timed("deploy(): function files, settings", lambda: deploy(Database(url), settings, options, echo=echo))
    return steps


def stall(ops: list[Op], start: float, end: float) -> float:
    """The longest enqueue or claim that started in [start, end) (one blocked by a step starts
    while it runs and ends when it commits, at the next step's start)."""
    inside = [o.seconds for o in ops if o.kind in ("enqueue", "claim") and start <= o.start < end]
    return max(inside, default=0.0)


@dataclass
class Timed:
    migration: str
    statement: str
    seconds: float


def statement_times(url: str, extra: list[Path], threshold: float = 0.05) -> list[Timed]:
    """Without load: each migration's statements, one by one in its transaction as deploy runs it,
    timed; those slower than ``threshold`` s (each holds its locks until the migration commits)."""
    import pglast  # a dev dependency (tests/sqlnames.py); only this pass needs it

    settings, slow = Settings(db_url=url), []
    with psycopg.connect(url) as conn:
        for m in render_migrations(settings, extra)[1:]:
            with conn.transaction():
                conn.execute("select set_config('lock_timeout', '10s', true)")
                for text in pglast.split(render_unit(settings, m)):
                    start = time.perf_counter()
                    conn.execute(text.encode(), prepare=False)
                    took = time.perf_counter() - start
                    if took >= threshold:
                        slow.append(Timed(f"{m.version}_{m.name}", " ".join(text.split())[:110], took))
            with Database(url).session() as session:  # not timed: it holds no lock writers wait for
                run_outside(session, settings, m, lock_timeout=timedelta(seconds=10))
    return slow


def statement_table(slow: list[Timed]) -> list[str]:
    lines = ["", "The statements behind the stalls: the same migrations on a second copy of the same "
             "table without load, each statement timed inside its migration's transaction (those over "
             "50 ms; a lock a statement takes is held until its migration commits, so an enqueue or claim "
             "that needs it waits for the rest of the migration too):", "",
             "| migration | statement | took (ms) |", "|---|---|---:|"]
    for t in slow:
        lines.append(f"| {t.migration} | `{t.statement.replace('|', '/')}` | {t.seconds * 1000:,.0f} |")
    return lines


def table(rows: int, steps: list[Step], ops: list[Op], baseline: tuple[float, float], meta: str,
          slow: list[Timed], markers: tuple[str, str] = (START, END)) -> str:
    begin, end = steps[0].start, steps[-1].start + steps[-1].seconds
    during = [o for o in ops if o.kind in ("enqueue", "claim") and o.start <= end
              and o.start + o.seconds >= begin]
    errors = [o for o in ops if o.error and o.start <= end and o.start + o.seconds >= begin]
    latencies = [o.seconds for o in during]
    worst = max(latencies, default=0.0)
    title, flag = "the packaged migrations", ""
    lines = [markers[0], f"### Live upgrade: deploying 0002..head under load, {title}", "",
             f"`python -m bench.live_upgrade --rows {rows}{flag}` ({meta}). `jobs` holds {rows:,} rows "
             "(90% completed, 6% pending, 3% dead, 1% failed; `job_attempts` a row for each job that "
             "took 3 attempts) when migration 0001 is followed by "
             "0002..head, applied as `jobkit deploy` applies them (lock_timeout 500 ms, retries), "
             "while 2 sessions enqueue and 2 claim + complete, one operation every 2 ms each.", "",
             f"- **longest stall of an enqueue or claim during the deploy: {worst * 1000:,.0f} ms** "
             f"(target < 1 s: {'met' if worst < 1 else 'missed'}); "
             f"p99 {percentile(latencies, 99) * 1000:,.1f} ms, "
             f"p50 {percentile(latencies, 50) * 1000:,.1f} ms over {len(latencies):,} operations; "
             f"{len(errors)} failed",
             f"- before the deploy: p99 {baseline[0] * 1000:,.1f} ms, max {baseline[1] * 1000:,.0f} ms",
             "", "| step | took (s) | longest enqueue/claim that started during it (ms) |", "|---|---:|---:|"]
    for step in steps:
        lines.append(f"| {step.label} | {step.seconds:,.2f} | "
                     f"{stall(ops, step.start, step.start + step.seconds) * 1000:,.0f} |")
    if errors:
        lines += ["", "Errors seen by the load: " + "; ".join(sorted({str(e.error)[:120] for e in errors}))]
    lines += statement_table(slow)
    lines.append(markers[1])
    return "\n".join(lines)


def fresh(cluster: BenchCluster, name: str, rows: int, echo: Callable[[str], None]) -> str:
    with cluster.admin() as admin:
        admin.execute_with_identifiers("drop database if exists {n} with (force)", n=name)
        admin.execute_with_identifiers("create database {n}", n=name)
    url = cluster.url(name)
    t = time.perf_counter()
    prepare(url, rows)
    echo(f"0001 + {rows:,} rows in {time.perf_counter() - t:.1f} s")
    return url


def run(cluster: BenchCluster, rows: int, extra: list[Path],
        echo: Callable[[str], None] = print) -> tuple[list[Step], Load, tuple[float, float]]:
    url = fresh(cluster, "live_upgrade", rows, echo)
    load = Load(url)
    load.start()
    time.sleep(5)
    warm = time.perf_counter()
    time.sleep(5)
    base = [o.seconds for o in list(load.ops) if o.kind in ("enqueue", "claim") and o.start >= warm]
    baseline = (percentile(base, 99), max(base))
    try:
        steps = upgrade(url, echo, extra)
        time.sleep(2)
    finally:
        load.finish()
    return steps, load, baseline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.live_upgrade", description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    extra: list[Path] = []
    before = os.getloadavg()[0]  # other processes on the machine (the figures move with it)
    with BenchCluster() as cluster:
        steps, load, baseline = run(cluster, args.rows, extra)
        slow = statement_times(fresh(cluster, "live_upgrade_statements", args.rows, print), extra)
        meta = (f"PostgreSQL {cluster.server_version()}, fsync on, {os.cpu_count()} cores; the machine's "
                f"load average was {before:.1f} before the run started")
    markers = (START, END)
    text = table(args.rows, steps, load.ops, baseline, meta, slow, markers)
    print(text)
    if not args.no_write:
        write_section(ROOT / "docs" / "BENCHMARKS.md", *markers, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
