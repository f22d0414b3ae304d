"""`python -m bench.raw_gap_cg [--small 1000] [--big 3000] [--variants raw,rawmin,jobs,fn1,fn2]`: server
instructions per job of bench.raw_gap's pgbench variants over the wire.

The working tree is deployed as bench.callgrind deploys it and served by bench.steps_wire's postmaster
under callgrind (fsync on, no preloaded libraries, autovacuum off), as bench.drain_wire_cg serves the
Drainer. Per variant: the jobs are put in by SQL (bench.raw_gap's fill, not counted), then pgbench's
4 clients drain them with the variant's script over the server's socket; the instructions of every
backend that pgbench opened are summed, and pgbench's own (it runs under callgrind too). Two
drains of ``--small`` and ``--big`` jobs: the difference
over the extra jobs is the cost a job, connections cancelled. bench.drain_wire_cg gives the same
figure for the Drainer, and bench.worker_cost the Drainer's own process."""

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
from .baseline_venv import working_tree
from .drain_wire_cg import _files, _new_files, _settled

CLIENTS = 4


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


def _drain(server: steps_wire.Server, variant: str, n: int) -> tuple[int, int]:
    with server.connect() as conn:  # the fill's backend, waited for so that it is not counted
        pid = conn.execute("select pg_backend_pid()").fetchone()[0]
        if variant in ("raw", "rawmin"):
            conn.execute(f"drop table if exists {raw_gap.TABLES[variant]}")
        for statement in raw_gap.fill_sql(variant, n):
            conn.execute(statement)
        # pgbench's plan at bench/raw.py's 20,000 jobs (a nested loop over the primary key): at these
        # sizes the planner would hash the whole table on every claim instead
        joins = "off" if variant in ("raw", "rawmin", "jobs") else "on"
        for setting in ("enable_hashjoin", "enable_mergejoin"):
            conn.execute(sql.SQL("alter database {} set {} = {}").format(
                sql.Identifier(server.db), sql.Identifier(setting), sql.Literal(joins)))
    _written(server.dir / f"cg.{pid}")
    before = _files(server)
    client = _pgbench(server, raw_gap.SCRIPTS[variant], CLIENTS, math.ceil(n / raw_gap.CLAIM / CLIENTS) + 2)
    new = _new_files(server, before, CLIENTS)
    total = _settled(new)
    print(f"  {variant} drain of {n:,}: {len(new)} backends, {total:,} instructions; pgbench {client:,}",
          flush=True)
    return total, client


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.raw_gap_cg")
    ap.add_argument("--small", type=int, default=1000, help="jobs in the first drain")
    ap.add_argument("--big", type=int, default=3000, help="jobs in the second drain")
    ap.add_argument("--variants", default="raw,rawmin,jobs,fn1,fn2")
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
