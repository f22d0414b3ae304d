"""`python -m bench.perf23 [--ref main] [--rounds 2] [--quick]`: issue 23's before/after, one run.

Exports REF (``git archive``) to a temp dir as the ``jobkit`` package, then runs, on one cluster
(fsync on), the same measurements against REF's code and the working tree's code in turn (A, B,
B, A, ... so drift hits both alike), each side in a child process whose PYTHONPATH puts its code
first; each child deploys its own code into a fresh database. Per side it reports the median of:

- single enqueue: ``jobkit.enqueue(conn, ...)`` in a loop on one autocommit connection (the public
  API) and ``Lifecycle.enqueue`` (bench.jk's path), each call its own commit;
- bulk enqueue: ``enqueue_many``, 1,000 a statement;
- drain at a fixed window (concurrency 16, batch 100, prefetch 25) and at ``Drainer()`` defaults;
- WAL bytes per job for the bulk enqueue and for the drain (pg_current_wal_lsn difference: the
  write amplification, which machine noise does not move).

Not a regression gate: a tool to quote in docs/BENCHMARKS.md ("Issue 23: profile findings").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURES = ("single_api", "single_lifecycle", "bulk", "drain_fixed", "drain_defaults",
            "wal_bulk", "wal_drain")


def export(rev: str, into: Path) -> str:
    """REF's toolkit/ sql/ templates/ laid out as an importable ``jobkit`` under into/pkgs."""
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", rev],
                            capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "toolkit", "sql",
                              "templates"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "toolkit" / "_sql").symlink_to(into / "sql", target_is_directory=True)
    (into / "toolkit" / "_templates").symlink_to(into / "templates", target_is_directory=True)
    (into / "pkgs").mkdir()
    (into / "pkgs" / "jobkit").symlink_to(into / "toolkit", target_is_directory=True)
    return commit


def child(admin_url: str, sizes: dict[str, int]) -> dict[str, float]:
    """One side's measurements (runs in the child, with that side's jobkit imported)."""
    import asyncio
    import time

    import jobkit
    import psycopg
    from psycopg import sql

    from . import jk
    from .cluster import install_jobkit
    from .common import JOB_TYPE, DrainConfig, scalar
    from .verify import Tally

    out: dict[str, float] = {}

    def fresh() -> str:
        name = f"p23_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        url = admin_url.rsplit("/", 1)[0] + "/" + name
        install_jobkit(url)
        return url

    def drop(url: str) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            name = url.rsplit("/", 1)[1]
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))

    def lsn(url: str) -> int:
        return int(scalar(url, "select pg_current_wal_lsn() - '0/0'::pg_lsn"))

    url = fresh()
    try:
        n = sizes["single"]
        with psycopg.connect(url, autocommit=True) as conn:
            jobkit.enqueue(conn, JOB_TYPE, {"i": -1})
            start = time.perf_counter()
            for i in range(n):
                jobkit.enqueue(conn, JOB_TYPE, {"i": i})
            out["single_api"] = n / (time.perf_counter() - start)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("delete from jobkit.jobs")
        out["single_lifecycle"] = float(jk.enqueue_single(url, n).value or 0)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("delete from jobkit.jobs")
            conn.execute("vacuum jobkit.jobs")
        before = lsn(url)
        sample = jk.enqueue_bulk(url, sizes["bulk"])
        out["wal_bulk"] = (lsn(url) - before) / sizes["bulk"]
        out["bulk"] = float(sample.value or 0)
    finally:
        drop(url)
    url = fresh()
    try:
        jk.fill(url, sizes["drain"])
        before = lsn(url)
        tally = Tally()
        elapsed = asyncio.run(jk.drain_async(url, DrainConfig(16, 100, 25), tally))
        out["wal_drain"] = (lsn(url) - before) / sizes["drain"]
        out["drain_fixed"] = sizes["drain"] / elapsed
    finally:
        drop(url)
    url = fresh()
    try:
        out["drain_defaults"] = float(jk.drain_defaults(url, sizes["drain"]).value or 0)
    finally:
        drop(url)
    return out


STATS = """select calls, round((total_exec_time / calls * 1000)::numeric, 1) as us,
       round(((shared_blks_hit + shared_blks_read)::numeric / calls), 1) as blocks,
       round((wal_bytes / calls)::numeric) as wal, toplevel,
       regexp_replace(left(query, 110), '\\s+', ' ', 'g') as query
from pg_stat_statements where dbid = (select oid from pg_database where datname = current_database())
  and total_exec_time > 0 order by total_exec_time desc limit 14"""


def profile_child(admin_url: str, sizes: dict[str, int]) -> dict[str, list[list[object]]]:
    """pg_stat_statements (track = all: statements inside functions too) per phase: single
    enqueues, bulk enqueues, a drain. Per statement: calls, mean us, blocks and WAL bytes a call."""
    import asyncio

    import jobkit
    import psycopg
    from psycopg import sql

    from . import jk
    from .cluster import install_jobkit
    from .common import JOB_TYPE, DrainConfig, execute
    from .verify import Tally

    name = f"p23_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    out: dict[str, list[list[object]]] = {}

    def take(phase: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            out[phase] = [list(r) for r in conn.execute(STATS).fetchall()]  # type: ignore[arg-type]
            conn.execute("select pg_stat_statements_reset()")

    try:
        install_jobkit(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("create extension if not exists pg_stat_statements")
            conn.execute(sql.SQL("alter database {} set pg_stat_statements.track = 'all'").format(
                sql.Identifier(name)))
        execute(url, "select pg_stat_statements_reset()")
        with psycopg.connect(url, autocommit=True) as conn:
            for i in range(sizes["single"]):
                jobkit.enqueue(conn, JOB_TYPE, {"i": i})
        take("single enqueue")
        execute(url, "delete from jobkit.jobs", "vacuum analyze jobkit.jobs",
                "select pg_stat_statements_reset()")
        jk.enqueue_bulk(url, sizes["bulk"])
        take("bulk enqueue")
        execute(url, "vacuum analyze jobkit.jobs", "select pg_stat_statements_reset()")
        asyncio.run(jk.drain_async(url, DrainConfig(16, 100, 25), Tally()))
        take("drain (claim + complete)")
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))
    return out


def run_side(pkgs: Path | None, admin_url: str, sizes: dict[str, int], mode: str = "--child") -> Any:
    path = [str(pkgs)] if pkgs else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "bench.perf23", mode, admin_url, json.dumps(sizes)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(ref: str, results: dict[str, list[dict[str, float]]]) -> str:
    lines = [f"| measure | {ref} (median, min-max) | working tree (median, min-max) | new ÷ old |",
             "|---|---:|---:|---:|"]
    for m in MEASURES:
        old = [r[m] for r in results["ref"]]
        new = [r[m] for r in results["work"]]
        unit = " B/job" if m.startswith("wal") else " jobs/s"

        def fmt(v: float) -> str:
            return f"{v:,.0f}"
        lines.append(f"| {m}{unit} | {fmt(statistics.median(old))} ({fmt(min(old))}-{fmt(max(old))}) | "
                     f"{fmt(statistics.median(new))} ({fmt(min(new))}-{fmt(max(new))}) | "
                     f"{statistics.median(new) / statistics.median(old):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.perf23", description=__doc__)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--profile-child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true",
                    help="instead: pg_stat_statements per phase for each side (one run each, track = all)")
    ap.add_argument("--ref", default="main", help="the commit to compare with (default: main)")
    ap.add_argument("--rounds", type=int, default=2, help="A,B then B,A pairs (default 2)")
    ap.add_argument("--quick", action="store_true", help="smaller N")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return 0
    if args.profile_child:
        stats = profile_child(args.profile_child[0], json.loads(args.profile_child[1]))
        print(json.dumps(stats, default=str))
        return 0
    from .cluster import BenchCluster

    sizes = ({"single": 500, "bulk": 10_000, "drain": 10_000} if args.quick
             else {"single": 2_000, "bulk": 20_000, "drain": 20_000})
    tmp = Path(tempfile.mkdtemp(prefix="jobkit-p23-"))
    results: dict[str, list[dict[str, float]]] = {"ref": [], "work": []}
    try:
        commit = export(args.ref, tmp)
        if args.profile:
            extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
            with BenchCluster(extra=extra) as cluster:
                for side, pkgs in (("ref " + commit, tmp / "pkgs"), ("working tree", None)):
                    print(f"\n## {side}")
                    for phase, rows in run_side(pkgs, cluster.url(), sizes, "--profile-child").items():
                        print(f"\n{phase}\n| calls | mean us | blocks/call | WAL B/call | top | statement |")
                        print("|---:|---:|---:|---:|---|---|")
                        for r in rows:
                            print("| " + " | ".join(str(x).replace("|", "/") for x in r) + " |")
            return 0
        with BenchCluster() as cluster:
            for r in range(args.rounds):
                order = [("ref", tmp / "pkgs"), ("work", None)]
                for side, pkgs in (order if r % 2 == 0 else order[::-1]):
                    got = run_side(pkgs, cluster.url(), sizes)
                    print(f"round {r + 1} {side}: " + ", ".join(f"{k}={v:,.0f}" for k, v in got.items()),
                          flush=True)
                    results[side].append(got)
        print()
        print(table(f"{args.ref} ({commit})", results))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
