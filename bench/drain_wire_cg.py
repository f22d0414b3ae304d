"""`python -m bench.drain_wire_cg [--ref REF ...] [--small 1000] [--big 3000]`: server instructions per
drained job over the wire, every backend the fixed-window drain opens counted.

bench.callgrind's drain runs claim + complete in single-user mode with literal parameters: it misses
what the wire costs (Bind, parameter input, result output, the protocol) and whatever the worker
sends besides (listeners, pause probes, due counts, a second claim loop). Here each side is
deployed as bench.callgrind deploys it and served by a postmaster under callgrind
(bench.steps_wire's Server: fsync on, no preloaded libraries, autovacuum off). The side's jobs
are put in with its own ``enqueue_many`` (bench/baseline_driver.py's fill, not counted), then it
drains with baseline_driver's fixed window (``Drainer(concurrency=16, batch_size=100,
prefetch=25)``, a pool of 4) in its own interpreter; the instructions of every backend that the
drain opened (one callgrind file per process, written when it exits) are summed. Two drains of
``--small`` and ``--big`` jobs: the difference over the extra jobs is the cost per job, start-up
(connections, the first plans) cancelled. The server runs ~50x slower under valgrind, so the
worker's batches (group-committed completions) can differ from a real drain's: bench.drain_wire
counts those at full speed."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from . import callgrind, steps_wire
from .baseline_venv import Side, add_ref_option, measured_sides
from .drain_wire import _child


def _url(server: steps_wire.Server) -> str:
    return f"postgresql://postgres@/{server.db}?host={server.dir}&port={steps_wire.PORT}"


def _files(server: steps_wire.Server) -> set[Path]:
    return set(server.dir.glob("cg.*"))


def _settled(files: set[Path]) -> int:
    """The summed totals of ``files`` once every one of them has been written."""
    for _ in range(600):
        if all(steps_wire._has_totals(f) for f in files):
            return sum(callgrind._total(f) for f in files)
        time.sleep(0.5)
    raise RuntimeError("a drain backend wrote no callgrind totals")


def _drain(server: steps_wire.Server, side: Side, n: int, claimers: int | None,
           keys: int = 0) -> tuple[int, int]:
    """(instructions of the drain's backends, how many backends); each backend's total printed."""
    _child(side, _url(server), n, "fill", keys=keys)
    time.sleep(2)
    before = _files(server)
    _child(side, _url(server), n, "drain", claimers)
    time.sleep(2)
    new = _files(server) - before
    total = _settled(new)
    print(f"  {side.label} drain of {n:,}: backends " + ", ".join(
        f"{callgrind._total(f):,}" for f in sorted(new)), flush=True)
    return total, len(new)


def measure(side: Side, small: int, big: int, claimers: int | None = None, keys: int = 0) -> None:
    dep = callgrind.Deployed(side, fill=0)
    try:
        server = steps_wire.Server(dep, side.label)
        try:
            a, na = _drain(server, side, small, claimers, keys)
            b, nb = _drain(server, side, big, claimers, keys)
        finally:
            server.close()
    finally:
        dep.close()
    print(f"{side.label:32} {(b - a) / (big - small):>10,.0f} server instructions per job "
          f"(drains of {small:,} and {big:,}: {a:,} and {b:,} in {na} and {nb} backends)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.drain_wire_cg")
    add_ref_option(ap)
    ap.add_argument("--small", type=int, default=1000, help="jobs in the first drain")
    ap.add_argument("--big", type=int, default=3000, help="jobs in the second drain")
    ap.add_argument("--rounds", type=int, default=1, help="measure each side this many times")
    ap.add_argument("--claimers", type=int, default=None,
                    help="the working tree's Drainer(claimers=K) (default: its default)")
    ap.add_argument("--keys", type=int, default=0,
                    help="the working tree's jobs over K concurrency keys of a fair type (bench/keys.py)")
    args = ap.parse_args()
    sides = measured_sides(args.ref)
    for _ in range(args.rounds):
        for side in sides:
            mine = side.label == sides[0].label
            measure(side, args.small, args.big, args.claimers if mine else None, args.keys if mine else 0)


if __name__ == "__main__":
    main()
