"""`python -m bench.enqueue_wire [--ref REF] [--n 4] [--warm 3] [--bulk 1000] [--top K]
[--per-backend]`: server instructions per job of a bulk enqueue as a client sends it over the wire:
each side's own
``jobkit.enqueue_many`` (run by that side's Python, as bench/baseline_driver.py's bulk figure runs
it: 1,000 jobs a call, ``{"i": i}`` payloads, autocommit) against a postmaster under callgrind.

bench.callgrind's bulk runs in single-user mode with literal arguments: it cannot see how
parameters are received (Bind, jsonb_recv/array_recv, text or binary), nor the result sent back.
Here, as in bench.steps_wire, each side is deployed, a copy of its data directory is served by a
postmaster under valgrind's callgrind (fsync on, no preloaded libraries), and the client connects
through the Unix socket. Each measured connection (one backend) makes ``--warm`` calls, or
``--warm + --n``; the difference of the two backends' totals over the extra jobs is what a job
costs the server, from Bind to commit. The client is not counted (see --client for its time).
``--per-backend``: a fresh backend's totals for 0, 1, 2 and 20 calls, so its first call (the
relation and catalog caches, the plpgsql functions compiled) is seen apart from a later one."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from . import callgrind, steps_wire
from .baseline_venv import Side, add_ref_option, measured_sides
from .steps_wire import Server

BULK = 1000
PORT = 5493  # not steps_wire's: both may run at once

#: Run by the side's own interpreter (-I: its own jobkit only): ``count`` enqueue_many calls of
#: BULK jobs on one connection; prints the backend's pid, then the client's seconds per call.
CLIENT = """
import sys, time, psycopg, jobkit
host, port, db, count, start, BULK = sys.argv[1], int(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:7])
with psycopg.connect(host=host, port=port, user="postgres", dbname=db, autocommit=True) as conn:
    print(conn.execute("select pg_backend_pid()").fetchone()[0], flush=True)
    for c in range(count):
        lo = start + c * BULK
        jobkit.enqueue_many(conn, [jobkit.NewJob("bench.noop", {"i": i}) for i in range(lo, lo + BULK)])
"""


def _backend(server: Server, side: Side, count: int, start: int, keep: Path) -> int:
    done = subprocess.run([str(side.python), "-I", "-c", CLIENT, str(server.dir), str(PORT), server.db,
                           str(count), str(start), str(BULK)], capture_output=True, text=True, check=True)
    pid = int(done.stdout.split()[0])
    return server.total(pid, keep)


def _per_backend(server: Server, side: Side, out: Path) -> None:
    """A fresh backend's totals for 0, 1, 2 and 20 calls (each twice, the smaller kept): what its
    first call costs the server beyond a later one (catalog caches, plpgsql compiles)."""
    got: dict[int, int] = {}
    for k, count in enumerate([0, 1, 2, 20] * 2):
        total = _backend(server, side, count, 10_000_000 * (k + 1), out / f"pb-{k}.cg")
        got[count] = min(total, got.get(count, total))
    later = (got[20] - got[2]) // 18
    print(f"{side.label:32} a fresh backend: connect {got[0]:,}; first call {got[1] - got[0]:,}; second "
          f"{got[2] - got[1]:,}; calls 3-20, a call {later:,}; all 20 calls {got[20] - got[0]:,} "
          "instructions", flush=True)


def _side(side: Side, args: argparse.Namespace, out: Path) -> None:
    dep = callgrind.Deployed(side, fill=0)
    try:
        server = Server(dep, side.label)
        try:
            with server.connect() as conn:
                for stmt in callgrind.ANALYZE.split(";"):
                    conn.execute(stmt)
            if args.per_backend:
                _per_backend(server, side, out)
                return
            for r in range(args.rounds):
                files = [out / f"{r}-small.cg", out / f"{r}-big.cg"]
                small = _backend(server, side, args.warm, 10_000_000 * (2 * r + 1), files[0])
                big = _backend(server, side, args.warm + args.n, 10_000_000 * (2 * r + 2), files[1])
                per = args.n * BULK
                print(f"{side.label:32} enqueue_many, {BULK:,} a call  {(big - small) / per:>10,.0f} "
                      "instructions per job", flush=True)
                for row in callgrind.top(files[0], files[1], per, args.top) if args.top else []:
                    print("    " + row)
        finally:
            server.close()
    finally:
        dep.close()


def main() -> None:
    global BULK  # noqa: PLW0603 - the harness's one knob, read by _backend and _side
    ap = argparse.ArgumentParser(prog="python -m bench.enqueue_wire")
    add_ref_option(ap, "this commit's enqueue_many")
    ap.add_argument("--n", type=int, default=4, help="calls beyond the warm-up")
    ap.add_argument("--warm", type=int, default=3, help="warm-up calls")
    ap.add_argument("--rounds", type=int, default=1, help="measure each side this many times")
    ap.add_argument("--top", type=int, default=0, help="list the K biggest inclusive costs a job")
    ap.add_argument("--bulk", type=int, default=BULK,
                    help="jobs a call (20000 --warm 0 --n 1: a fresh backend's one call of 20,000)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the callgrind files here")
    ap.add_argument("--per-backend", action="store_true",
                    help="instead: a fresh backend's first call, second, and later calls (20 in all)")
    args = ap.parse_args()
    BULK = args.bulk
    steps_wire.PORT = PORT
    with tempfile.TemporaryDirectory(prefix="jk-ewire-out-") as tmp:
        for i, side in enumerate(measured_sides(args.ref)):
            out = (args.keep or Path(tmp)) / f"side{i}"
            out.mkdir(parents=True, exist_ok=True)
            _side(side, args, out)


if __name__ == "__main__":
    main()
