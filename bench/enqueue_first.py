"""`python -m bench.enqueue_first [--ref REF] [--runs 4] [--calls 20] [--big 20000] [--profile]
[--settle] [--pgqueuer] [--instructions]`: a bulk enqueue's calls one by one, in a fresh process and
a fresh database, exactly as bench/baseline_driver.py's bulk runs them (connect, then ``calls`` calls
of ``enqueue_many`` x 1,000 in autocommit, the jobs built inside the window), for each side in its own
Python, sides alternating; then the other shape, one call of ``--big`` jobs (the issue's independent
harness's "bulk enqueue (`enqueue_many`, 20,000)"), in a fresh process and database too.

Per call: the client's wall (perf_counter) and CPU (process_time), and the server backend's CPU
(its /proc/PID/schedstat run time, in ns: the backend is a local process; also the time it waited
for a CPU while runnable, and its timeslices), so a call's wall splits
into client CPU, server CPU and the rest (the commit's WAL flush, waiting on each other, the
scheduler). ``--profile``: cProfile of the first call and of call 10 (first run). ``--settle``:
vacuum (freeze, analyze) each side's template after its deploy. ``--pgqueuer``: PgQueuer's bulk
enqueue (bench/pgq.py, timed after connect as the peers' table does) in both shapes, once a
rotation. ``--instructions``: instead of timing, the client process's instructions under callgrind
(load-independent) for import + connect, the first call, the second, a later one, all 20, and the
one big call. Wall-clock figures: quote the load average with them."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .baseline_venv import Side, add_ref_option, measured_sides
from .cluster import BenchCluster

#: Run by the side's own interpreter (-I): JSON with each call's client wall/cpu and server cpu.
CLIENT = r"""
import json, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
import psycopg, jobkit
imported = (time.perf_counter() - t0, time.process_time() - c0)
url, calls, size, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"

def server_ns(pid):  # (ns on a CPU, ns waiting for one, timeslices)
    with open(f"/proc/{pid}/schedstat") as f:
        return [int(x) for x in f.read().split()[:3]]

import gc
out = {"import": imported, "calls": [], "profiles": {}, "objects": len(gc.get_objects())}
with psycopg.connect(url, autocommit=True) as conn:
    pid = conn.info.backend_pid
    window = time.perf_counter()
    for c in range(calls):
        w, cpu, srv = time.perf_counter(), time.process_time(), server_ns(pid)
        jobs = [jobkit.NewJob("bench.noop", {"i": i}) for i in range(c * size, c * size + size)]
        built = time.perf_counter()
        if profile and c in (0, 9):
            import cProfile, pstats, io
            prof = cProfile.Profile()
            prof.enable()
        jobkit.enqueue_many(conn, jobs)
        if profile and c in (0, 9):
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
            out["profiles"][c + 1] = s.getvalue()
        end = server_ns(pid)
        out["calls"].append((time.perf_counter() - w, built - w, time.process_time() - cpu,
                             (end[0] - srv[0]) / 1e9, (end[1] - srv[1]) / 1e9, end[2] - srv[2]))
    out["window"] = time.perf_counter() - window
    out["gc"] = [g["collections"] for g in gc.get_stats()]
print(json.dumps(out))
"""


def _run(cluster: BenchCluster, key: str, side: Side, calls: int, size: int, profile: bool) -> dict[str, Any]:
    with cluster.database(key) as url:
        done = subprocess.run([str(side.python), "-I", "-c", CLIENT, url, str(calls), str(size),
                               "1" if profile else "0"], capture_output=True, text=True, check=True)
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _instructions(cluster: BenchCluster, key: str, side: Side, calls: int, size: int) -> int:
    """The client process's instructions (callgrind, no cache simulation): import, connect, calls."""
    with cluster.database(key) as url, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(side.python), "-I",
                        "-c", CLIENT, url, str(calls), str(size), "0"], capture_output=True, text=True,
                       check=True)
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError("callgrind wrote no totals")


def _count_instructions(cluster: BenchCluster, sides: list[Side], big: int) -> None:
    shapes = [(0, 1000), (1, 1000), (2, 1000), (20, 1000)] + ([(1, big)] if big else [])
    for i, side in enumerate(sides):
        got = {shape: _instructions(cluster, f"side_{i}", side, *shape) for shape in shapes}
        base = got[(0, 1000)]
        print(f"\n## {side.label}: client instructions (callgrind), import + connect = {base:,}")
        first, second, all20 = got[(1, 1000)] - base, got[(2, 1000)] - got[(1, 1000)], got[(20, 1000)] - base
        print(f"first call of 1,000: {first:,}; second: {second:,}; calls 3-20, a call: "
              f"{(got[(20, 1000)] - got[(2, 1000)]) // 18:,}; all 20 calls: {all20:,}"
              + (f"; one call of {big:,}: {got[(1, big)] - base:,}" if big else ""))


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def _summary(label: str, runs: list[dict[str, Any]], size: int) -> list[str]:
    lines = [f"\n## {label}: {len(runs)} fresh processes, {len(runs[0]['calls'])} call(s) of {size:,}"]
    lines.append("| call | wall ms (median, min-max) | building the jobs ms | client CPU ms | server CPU ms "
                 "| rest ms | server waiting for a CPU ms | server timeslices |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    n = len(runs[0]["calls"])
    picks = [0, 1, 2] + ([n // 2] if n > 4 else []) + ([n - 1] if n > 3 else [])
    for c in sorted(set(p for p in picks if p < n)):
        rows = [r["calls"][c] for r in runs]
        wall = [x[0] for x in rows]
        med = [statistics.median(x[i] for x in rows) for i in range(6)]
        lines.append(f"| {c + 1} | {_ms(med[0])} ({_ms(min(wall))}-{_ms(max(wall))}) | {_ms(med[1])} | "
                     f"{_ms(med[2])} | {_ms(med[3])} | {_ms(med[0] - med[2] - med[3])} | {_ms(med[4])} | "
                     f"{med[5]:.0f} |")
    totals = [(sum(x[0] for x in r["calls"]), sum(x[2] for x in r["calls"]), sum(x[3] for x in r["calls"]))
              for r in runs]
    med = [statistics.median(t[i] for t in totals) for i in range(3)]
    jobs = n * size
    lines.append(f"| all {n} | {_ms(med[0])} ({jobs / med[0]:,.0f} jobs/s) | | {_ms(med[1])} | "
                 f"{_ms(med[2])} | {_ms(med[0] - med[1] - med[2])} |")
    imports = [r["import"] for r in runs]
    lines.append(f"\nimport psycopg + jobkit (outside the window): wall "
                 f"{_ms(statistics.median(i[0] for i in imports))} ms, "
                 f"CPU {_ms(statistics.median(i[1] for i in imports))} ms")
    for r in runs:
        pairs = " ".join(f"{x[2] * 1e3:.1f}/{x[3] * 1e3:.1f}" for x in r["calls"])
        lines.append(f"client CPU / server CPU ms per call: {pairs}")
    lines.append(f"objects tracked by gc after the imports: {runs[0]['objects']:,}; collections per "
                 f"generation by the end: {runs[0]['gc']}")
    for call, text in runs[0].get("profiles", {}).items():
        lines.append(f"\ncProfile, call {call} (first run):\n```\n{text.strip()}\n```")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.enqueue_first")
    add_ref_option(ap)
    ap.add_argument("--runs", type=int, default=4, help="fresh processes per side and shape")
    ap.add_argument("--calls", type=int, default=20, help="calls of 1,000 in the driver's shape")
    ap.add_argument("--big", type=int, default=20_000, help="jobs in the one-call shape (0: skip it)")
    ap.add_argument("--profile", action="store_true", help="cProfile call 1 and call 10 (first run)")
    ap.add_argument("--settle", action="store_true",
                    help="vacuum (freeze, analyze) each template after its deploy")
    ap.add_argument("--pgqueuer", action="store_true",
                    help="also time PgQueuer's bulk enqueue (bench/pgq.py), both shapes, same rotation")
    ap.add_argument("--instructions", action="store_true",
                    help="instead: count the client's instructions under callgrind (load-independent)")
    args = ap.parse_args()
    sides = measured_sides(args.ref)
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    pgq_rates: dict[str, list[float]] = {}
    print(f"load average at start: {os.getloadavg()}")
    with BenchCluster() as cluster:
        for i, side in enumerate(sides):
            cluster.register(f"side_{i}", _installer(side))
            if args.settle:
                _settle(cluster, f"side_{i}")
        if args.instructions:
            _count_instructions(cluster, sides, args.big)
            return
        for r in range(args.runs):
            order = list(enumerate(sides)) if r % 2 == 0 else list(enumerate(sides))[::-1]
            for i, side in order:
                shapes = [(args.calls, 1000)] + ([(1, args.big)] if args.big else [])
                for calls, size in shapes:
                    out = _run(cluster, f"side_{i}", side, calls, size, args.profile and r == 0)
                    results.setdefault((i, f"{calls}x{size}"), []).append(out)
            if args.pgqueuer:
                for calls, size in [(args.calls, 1000)] + ([(1, args.big)] if args.big else []):
                    pgq_rates.setdefault(f"{calls}x{size}", []).append(_pgqueuer(cluster, calls * size, size))
    print(f"load average at end: {os.getloadavg()}")
    for (i, shape), runs in sorted(results.items()):
        calls, size = (int(x) for x in shape.split("x"))
        print("\n".join(_summary(f"{sides[i].label}, {shape}", runs, size)))
    for shape, rates in pgq_rates.items():
        print(f"\n## PgQueuer, {shape}: jobs/s median {statistics.median(rates):,.0f} "
              f"({min(rates):,.0f}-{max(rates):,.0f}; {len(rates)} runs)")


def _pgqueuer(cluster: BenchCluster, n: int, batch: int) -> float:
    """PgQueuer's bulk enqueue as the peers' table times it (bench/pgq.py: after connect), ``batch``
    jobs a call."""
    from . import pgq

    cluster.register("pgqueuer", pgq.install)
    saved, pgq.BULK_BATCH = pgq.BULK_BATCH, batch
    try:
        with cluster.database("pgqueuer") as url:
            got = pgq.enqueue_bulk(url, n)
    finally:
        pgq.BULK_BATCH = saved
    if not got.ok:
        raise RuntimeError(f"PgQueuer's bulk enqueue failed its check: {got.check.detail}")
    return float(got.value)


def _settle(cluster: BenchCluster, key: str) -> None:
    import psycopg

    with psycopg.connect(cluster.url(cluster.template(key)), autocommit=True) as conn:
        conn.execute("vacuum (freeze, analyze)")


def _installer(side: Side) -> Any:
    from .baseline import installer

    return installer(side)


if __name__ == "__main__":
    main()
