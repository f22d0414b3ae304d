"""The worker's own cost per job: `python -m bench.worker_cost [--ref REF ...] [--n N] [--small S]
[--defaults]`

bench.callgrind counts the server's instructions per job; this counts the worker's, the other half
of the same 2 cores. Each side (the working tree, and each REF built as ``--baseline`` builds it)
gets a database of its own deployed by its own ``jobkit deploy`` on one cluster; the jobs are put
in by SQL (``enqueue_json``, as bench.callgrind fills), so only the drain runs in the worker's
process. The drain is bench/baseline_driver.py's (``Drainer(concurrency=16, batch_size=100,
prefetch=25)`` on a pool of 4; ``--defaults``: ``Drainer(concurrency=16)`` on a pool of 8) with its
no-op handler, run in that side's interpreter. Per side it reports:

- Python function calls per job (cProfile, every call the process made during the drain of N jobs
  minus those of ``--small`` jobs, divided by the difference: the pool's connections and first
  statements cancel; a count, not a time, so the machine's load barely moves it);
- the worker process's instructions per job (valgrind's callgrind, whole process: the drain of N
  jobs minus the drain of ``--small`` jobs, divided by the difference; start-up and imports cancel,
  and the heap after the imports is frozen (``gc.freeze``) so that a full collection's walk over it,
  which falls in one run and not the other, does not count as a per-job cost);
- CPU seconds per job (process time around the drain, no profiler; noisy on a shared machine, shown
  for scale).

Under callgrind the worker runs about 50 times slower than the server answers, so its group commits
carry more jobs per statement than in a timed run: the instruction count is the per-job path's, with
less of the per-statement work than a timed run has. Both sides are measured alike.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

import psycopg

from .baseline import installer
from .baseline_venv import DRIVER, Side, add_ref_option, measured_sides
from .callgrind import fill_sql
from .cluster import BenchCluster

SCRIPT = """
import asyncio, cProfile, gc, importlib.util, json, pstats, sys, time
spec = importlib.util.spec_from_file_location("driver", sys.argv[1])
driver = importlib.util.module_from_spec(spec)
spec.loader.exec_module(driver)
url, n, mode, fixed = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "fixed"
driver._drainer_classes()  # jobkit's worker modules imported, then the heap so far frozen: a full
gc.collect()  # collection's walk over it would fall in one run and not the other (about 1,000
gc.freeze()  # instructions a job of noise between two runs)
seen, first = [], []
profile = cProfile.Profile() if mode == "calls" else None
cpu = time.process_time()
if profile is not None:
    profile.enable()
asyncio.run(driver._drain(url, fixed, seen, first))
if profile is not None:
    profile.disable()
cpu = time.process_time() - cpu
calls = pstats.Stats(profile).total_calls if profile is not None else 0
print(json.dumps({"ok": len(seen) == n and len(set(seen)) == n, "cpu": cpu, "calls": calls}))
"""


def _fill(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for stmt in fill_sql(n).split(";"):
            if stmt.strip():
                conn.execute(stmt)


def _run(side: Side, url: str, n: int, mode: str, fixed: bool, out: Path | None = None) -> dict[str, float]:
    window = "fixed" if fixed else "defaults"
    cmd = [str(side.python), "-I", "-c", SCRIPT, str(DRIVER), url, str(n), mode, window]
    if out is not None:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{side.label}: the drain failed: {done.stderr.strip()[-600:]}")
    result: dict[str, float] = json.loads(lines[-1])
    if not result["ok"]:
        raise RuntimeError(f"{side.label}: the drain did not run each of {n} jobs once")
    if out is not None:
        match = re.search(r"Collected : (\d+)", done.stderr)
        if match is None:
            raise RuntimeError(f"{side.label}: no instruction count in valgrind's output")
        result["ir"] = float(match.group(1))
    return result


def measure(cluster: BenchCluster, side: Side, name: str, args: argparse.Namespace,
            outdir: Path) -> tuple[float, float, float]:
    """(calls per job, instructions per job, CPU microseconds per job) for one side."""
    fixed = not args.defaults

    def drained(n: int, mode: str, out: Path | None = None) -> dict[str, float]:
        with cluster.database(name) as url:
            _fill(url, n)
            return _run(side, url, n, mode, fixed, out)

    extra = args.n - args.small
    calls = (drained(args.n, "calls")["calls"] - drained(args.small, "calls")["calls"]) / extra
    cpu = min(drained(args.n, "cpu")["cpu"] for _ in range(args.cpu_runs)) / args.n * 1e6
    small = drained(args.small, "plain", outdir / f"{name}.small.cg")["ir"]
    big = drained(args.n, "plain", outdir / f"{name}.big.cg")["ir"]
    return calls, (big - small) / extra, cpu


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.worker_cost")
    add_ref_option(ap)
    ap.add_argument("--n", type=int, default=6000, help="jobs drained (callgrind: the longer run)")
    ap.add_argument("--small", type=int, default=2000, help="jobs of callgrind's shorter run")
    ap.add_argument("--cpu-runs", type=int, default=3, help="timed runs per side (the least CPU is shown)")
    ap.add_argument("--defaults", action="store_true", help="Drainer(concurrency=16), not the fixed window")
    args = ap.parse_args()
    if args.small >= args.n:
        ap.error("--small must be less than --n")
    sides = measured_sides(args.ref)
    with BenchCluster(echo=lambda _m: None) as cluster, tempfile.TemporaryDirectory(prefix="jk-wc-") as tmp:
        for i, side in enumerate(sides):
            cluster.register(f"side{i}", installer(side))
        print(f"{'side':40} {'calls/job':>10} {'worker instructions/job':>24} {'CPU us/job (min)':>17}")
        for i, side in enumerate(sides):
            calls, ir, cpu = measure(cluster, side, f"side{i}", args, Path(tmp))
            print(f"{side.label:40} {calls:>10.1f} {ir:>24,.0f} {cpu:>17.1f}", flush=True)


if __name__ == "__main__":
    main()
