"""`python -m bench.raw_gap_cg [--small 1000] [--big 3000] [--variants raw,...,drainer]`: server
instructions per job of bench.raw_gap's variants over the wire.

The working tree is deployed as bench.callgrind deploys it and served by bench.steps_wire's
postmaster under callgrind (fsync on, no preloaded libraries, autovacuum off), as
bench.drain_wire_cg serves the Drainer. Per variant the jobs are put in by SQL (bench.raw_gap's
fill; its backend is waited for and not counted), then drained over the server's socket: by
pgbench's 4 clients with the variant's script (pgbench itself runs under callgrind too, and its
instructions are shown), or by one Drainer as bench.drain_wire_cg drains (fixed: the fixed window
on a pool of 4; drainer: ``Drainer(concurrency=16)`` on a pool of 8; bench.worker_cost counts the
worker's process). The instructions of every backend that the drain opened are summed, once every
one has written its file. Two drains of ``--small`` and ``--big`` jobs: the difference over the
extra jobs is the cost a job, connections cancelled when both drains open as many."""

from __future__ import annotations

import argparse
import math
import subprocess
import tempfile
import time
from pathlib import Path

from jobkit.ops.localdb import find_pg_bin
from psycopg import sql

from . import callgrind, raw_gap, steps_wire
from .baseline_venv import DRIVER, working_tree
from .drain_wire import CHILD
from .drain_wire_cg import _files, _settled, _url

CLIENTS = 4
DRAINERS = ("fixed", "drainer")  # bench.raw_gap's Drainer variants, as bench.drain_wire_cg drains


def _pgbench(server: steps_wire.Server, script: str, clients: int, transactions: int) -> int:
    """Run pgbench (itself under callgrind) with ``script``; pgbench's own instructions."""
    with tempfile.TemporaryDirectory(prefix="jk-pgb-") as tmp:
        path, out = Path(tmp) / "script.sql", Path(tmp) / "pgbench.cg"
        path.write_text(script)
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
               str(find_pg_bin() / "pgbench"), "-n", "-M", "prepared", "-f", str(path), "-c", str(clients),
               "-j", str(min(clients, 2)), "-t", str(transactions), "-h", str(server.dir),
               "-p", str(steps_wire.PORT), "-U", "postgres", server.db]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed: {(done.stderr or done.stdout).strip()[-300:]}")
        return callgrind._total(out)


def _written(cg: Path) -> None:
    for _ in range(600):
        if cg.exists() and steps_wire._has_totals(cg):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{cg} was not written")


def _new_files(server: steps_wire.Server, before: set[Path], at_least: int) -> set[Path]:
    """The callgrind files written since ``before`` once no more come: a backend under valgrind
    writes its file some seconds after its client has gone (a fixed 2 s wait misses some)."""
    for _ in range(600):
        new = _files(server) - before
        if len(new) >= at_least and all(steps_wire._has_totals(f) for f in new):
            time.sleep(5)
            if _files(server) - before == new:
                return new
        time.sleep(0.5)
    raise RuntimeError("the drain's backends wrote no callgrind files")


def _drainer(server: steps_wire.Server, fixed: bool, n: int) -> None:
    """bench.drain_wire_cg's Drainer (baseline_driver's drain in the working tree's interpreter):
    the fixed window, or ``Drainer(concurrency=16)`` on a pool of 8."""
    code = CHILD.format(bench=str(DRIVER.parent))
    call = "d._drain(url, True, seen, first)"
    if call not in code:
        raise RuntimeError("bench.drain_wire's child no longer drains as expected")
    code = code.replace(call, f"d._drain(url, {fixed}, seen, first)")
    subprocess.run([str(working_tree().python), "-I", "-c", code, _url(server), str(n), "drain"],
                   capture_output=True, text=True, check=True)


def _drain(server: steps_wire.Server, variant: str, n: int) -> tuple[int, int]:
    with server.connect() as conn:  # the fill's backend, waited for so that it is not counted
        pid = conn.execute("select pg_backend_pid()").fetchone()[0]
        if variant in ("raw", "rawmin"):
            conn.execute(f"drop table if exists {raw_gap.TABLES[variant]}")
        for statement in raw_gap.fill_sql("jobs" if variant in DRAINERS else variant, n):
            conn.execute(statement)
        # pgbench's plan at bench/raw.py's 20,000 jobs (a nested loop over the primary key): at these
        # sizes the planner would hash the whole table on every claim instead
        joins = "off" if variant in ("raw", "rawmin", "jobs") else "on"
        for setting in ("enable_hashjoin", "enable_mergejoin"):
            conn.execute(sql.SQL("alter database {} set {} = {}").format(
                sql.Identifier(server.db), sql.Identifier(setting), sql.Literal(joins)))
    _written(server.dir / f"cg.{pid}")
    before = _files(server)
    if variant in DRAINERS:
        client = 0  # the worker's process: bench.worker_cost
        _drainer(server, variant == "fixed", n)
    else:
        transactions = math.ceil(n / raw_gap.CLAIM / CLIENTS) + 2
        client = _pgbench(server, raw_gap.SCRIPTS[variant], CLIENTS, transactions)
    new = _new_files(server, before, 1 if variant in DRAINERS else CLIENTS)
    total = _settled(new)
    print(f"  {variant} drain of {n:,}: {len(new)} backends, {total:,} instructions; pgbench {client:,}",
          flush=True)
    return total, client


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.raw_gap_cg")
    ap.add_argument("--small", type=int, default=1000, help="jobs in the first drain")
    ap.add_argument("--big", type=int, default=3000, help="jobs in the second drain")
    ap.add_argument("--variants", default="raw,rawmin,jobs,fn1,fn2,fixed,drainer")
    args = ap.parse_args()
    dep = callgrind.Deployed(working_tree(), fill=0)
    try:
        server = steps_wire.Server(dep, "raw_gap")
        try:
            for variant in args.variants.split(","):
                a, ca = _drain(server, variant, args.small)
                b, cb = _drain(server, variant, args.big)
                extra = args.big - args.small
                print(f"{variant:8} {(b - a) / extra:>10,.0f} server instructions per job, "
                      f"pgbench {(cb - ca) / extra:,.0f}", flush=True)
        finally:
            server.close()
    finally:
        dep.close()


if __name__ == "__main__":
    main()
