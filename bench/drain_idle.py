"""`python -m bench.drain_idle [--n 20000] [--rounds 2] [--shapes raw,defaults,fixed] [--claimers
0,1,2] [--every 5]`: where a drain's time goes: each process's time on a CPU, waiting for one, and
asleep, and what the worker's event loop waits on, sampled during the drain.

One cluster (bench.cluster's settings, fsync on); per drain a fresh database filled with ``--n``
jobs (baseline_driver's fill, analyzed), then the working tree drains it in a child interpreter as
baseline_driver does (``defaults``: ``Drainer(concurrency=16)`` on a pool of 8; ``fixed``:
concurrency 16, batch 100, prefetch 25 on a pool of 4). Sampled every ``--every`` ms:

- from this process: the scheduler's counters of the worker's main thread (its event loop) and of
  each of the database's client backends, the machine's busy time (/proc/stat), and each
  backend's state and wait event (pg_stat_activity, read from another database);
- inside the worker, by a thread reading the Drainer's fields (no await, no lock): claims in
  flight, completion statements in flight and completions waiting for one, the window's room
  (``limit - held``) and whether the next claim has room (at least half the window free), jobs
  queued for a runner and runners alive, and the pool's connections in use.

``raw``: bench/raw.py's ceiling (pgbench -c 4 -j 2), sampled alike (its client: pgbench's process).

Reported per drain: jobs/s; each process's time on a CPU and its time runnable but waiting for a
CPU (/proc/PID/schedstat, nanoseconds), as shares of the drain's time (first handler call to
drain()'s return; pgbench: its run); the rest of its time it slept (waiting on the other side or
on I/O); the jobs per CPU-second of the drain's own processes; the backends' states; and the share
of the worker's samples in each state.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg
import psycopg.conninfo
from jobkit.ops.localdb import find_pg_bin

from . import raw
from .cluster import BenchCluster

DRIVER = Path(__file__).with_name("baseline_driver.py")
Sched = tuple[int, int] | None  # ns on a CPU, ns runnable waiting for one (/proc/PID/schedstat)

#: The drain, in a child interpreter; a thread samples the Drainer. Prints one JSON line.
CHILD = """
import asyncio, json, sys, threading, time
from collections import Counter
from datetime import timedelta
sys.path.insert(0, {bench!r})
import baseline_driver as d
from jobkit.worker.drain import Drainer
from jobkit.worker.backends.postgres import PostgresBackend
import jobkit
url, fixed, every = sys.argv[1], sys.argv[2] == "fixed", float(sys.argv[3]) / 1000
extra = {{"claimers": int(sys.argv[4])}} if sys.argv[4] != "0" else {{}}
seen, first, states = [], [], Counter()

def sample(drainer, backend, stop):
    rec = drainer._recorder._completer
    pool = backend.pool._pool
    while not stop.is_set():
        time.sleep(every)
        if not first or not drainer._live:
            continue
        dr = drainer._live[0]
        limit = drainer.window.limit
        room = limit - drainer.held
        st = pool.get_stats()
        states["samples"] += 1
        states["claim in flight"] += drainer._reserved > 0
        states["completion statement in flight"] += not rec.idle
        states["completions waiting for the statement in flight"] += bool(rec._pending) and not rec.idle
        states["window: next claim has room (>= half free)"] += room >= max(1, limit // 2)
        half = max(1, limit // 2)
        states["no claim in flight and no room for one"] += drainer._reserved == 0 and room < half
        states["queue empty (runners have nothing to run)"] += not dr.queue
        states["all 16 slots running"] += drainer._free == 0
        states["pool connections in use (sum)"] += st.get("pool_size", 0) - st.get("pool_available", 0)
        states["window limit (sum)"] += limit
        states["held (sum)"] += drainer.held

async def main():
    jobs = jobkit.Registry()
    async def noop(payload, ctx):
        if not first:
            first.append(time.monotonic())
        seen.append(ctx.id)
    jobs.handler(d.JOB_TYPE, timeout=60)(noop)
    backend = PostgresBackend(url, max_size=4 if fixed else 8)
    await backend.open()
    stop = threading.Event()
    try:
        drainer = Drainer(jobs, backend, **(d.FIXED if fixed else {{"concurrency": 16}}), **extra)
        t = threading.Thread(target=sample, args=(drainer, backend, stop), daemon=True)
        t.start()
        await drainer.drain(d.JOB_TYPE, budget=timedelta(hours=1))
        end = time.monotonic()
        states["loops"] = drainer.claim_loops.get(d.JOB_TYPE, 1)
        stop.set()
        await drainer.shutdown(grace=timedelta(0))
    finally:
        await backend.close()
    return end

end = asyncio.run(main())
print(json.dumps({{"first": first[0], "end": end, "seen": len(seen), "states": states}}))
"""

FILL = """
import sys
sys.path.insert(0, {bench!r})
import baseline_driver as d, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    d._fill(c, int(sys.argv[2]))
    c.execute("analyze jobkit.jobs")
"""

BACKENDS = """
select pid, state, coalesce(wait_event_type || ':' || wait_event, 'CPU')
from pg_stat_activity where datname = %s and backend_type = 'client backend'
"""


def _sched(task: str) -> tuple[int, int] | None:
    """Nanoseconds a task has run on a CPU and waited on a run queue (runnable, no CPU free)."""
    try:
        fields = Path(f"{task}/schedstat").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[0]), int(fields[1])


def _machine_busy() -> tuple[int, int]:
    cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = cpu[3] + cpu[4]
    return sum(cpu) - idle, sum(cpu)


class Sampler(threading.Thread):
    """Samples the worker's and the backends' CPU and the backends' waits until stopped."""

    def __init__(self, url: str, worker: int, every: float, whole: bool = False) -> None:
        super().__init__(daemon=True)
        self.whole = whole  # the client's every thread (pgbench -j 2), not only its main one
        self.url, self.worker, self.every = url, worker, every
        self.stop = threading.Event()
        self.samples: list[tuple[float, Sched, dict[int, Sched], tuple[int, int]]] = []
        self.waits: list[tuple[float, Counter[str]]] = []

    def run(self) -> None:
        db = psycopg.conninfo.conninfo_to_dict(self.url)["dbname"]
        admin = psycopg.conninfo.make_conninfo(self.url, dbname="postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            while not self.stop.is_set():
                conn.execute("select pg_stat_clear_snapshot()")
                rows = conn.execute(BACKENDS, (db,)).fetchall()
                now = time.monotonic()
                seen: Counter[str] = Counter()
                for _pid, state, wait in rows:
                    seen["active: " + wait if state == "active" else str(state)] += 1
                self.waits.append((now, seen))
                pids = {int(r[0]): _sched(f"/proc/{r[0]}") for r in rows}
                self.samples.append((now, self._client(), pids, _machine_busy()))
                time.sleep(self.every)

    def _client(self) -> Sched:
        if not self.whole:
            return _sched(f"/proc/{self.worker}/task/{self.worker}")
        try:
            tasks = list(Path(f"/proc/{self.worker}/task").iterdir())
        except FileNotFoundError:
            return None
        return _sum([_sched(str(t)) for t in tasks])


def _share(a: Sched, b: Sched, secs: float) -> tuple[float, float]:
    if a is None or b is None:
        return 0.0, 0.0
    return (b[0] - a[0]) / 1e9 / secs, (b[1] - a[1]) / 1e9 / secs


def _sum(scheds: list[Sched]) -> Sched:
    return (sum(s[0] for s in scheds if s), sum(s[1] for s in scheds if s))


def _cpu(samples: list[Any], lo: float, hi: float) -> dict[str, tuple[float, float]]:
    """Over [lo, hi], each process's time on a CPU and runnable waiting for one, as shares of the
    drain's wall clock (the rest of it the process slept: waiting on a peer or I/O)."""
    inside = [s for s in samples if lo <= s[0] <= hi]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    secs = b[0] - a[0]
    client = [s[1] for s in inside if s[1] is not None]  # pgbench's tasks vanish as it exits
    out = {"client (the worker's event loop thread; pgbench: its process)":
           _share(client[0], client[-1], secs) if client else (0.0, 0.0)}
    backends = []
    for pid in {pid for s in inside for pid in s[2]}:  # a backend's first and last sample in the drain
        seen = [s[2][pid] for s in inside if s[2].get(pid) is not None]
        backends.append(_share(seen[0], seen[-1], secs) if seen else (0.0, 0.0))
    for i, share in enumerate(sorted(backends, reverse=True)):
        out[f"backend {i + 1}"] = share
    out["all backends"] = (sum(x[0] for x in backends), sum(x[1] for x in backends))
    out["machine, both cores busy (of 2.0)"] = (2 * (b[3][0] - a[3][0]) / max(b[3][1] - a[3][1], 1), 0.0)
    return out


def _waits(waits: list[tuple[float, Counter[str]]], lo: float, hi: float) -> dict[str, float]:
    inside = [w for t, w in waits if lo <= t <= hi]
    total: Counter[str] = Counter()
    for w in inside:
        total.update(w)
    return {k: v / max(len(inside), 1) for k, v in total.most_common()}


def measure_raw(cluster: BenchCluster, n: int, every: float) -> dict[str, Any]:
    """The raw ceiling as bench/raw.py runs it (pgbench, 4 clients, 2 threads), sampled alike: its
    client side is pgbench's process (both threads)."""
    with cluster.database("jobkit") as url:
        raw.setup(url, n)
        u = urlparse(url)
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
            f.write(raw.SCRIPT)
            f.flush()
            cmd = [str(find_pg_bin() / "pgbench"), "-n", "-M", "prepared", "-f", f.name, "-c", "4", "-j", "2",
                   "-t", str(math.ceil(n / raw.CLAIM / 4) + 2), "-h", u.hostname or "127.0.0.1",
                   "-p", str(u.port), "-U", u.username or "postgres", u.path.lstrip("/")]
            lo = time.monotonic()
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            sampler = Sampler(url, child.pid, every / 1000, whole=True)
            sampler.start()
            out, _ = child.communicate()
            hi = time.monotonic()
            sampler.stop.set()
            sampler.join()
        tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
        left = psycopg.connect(url, autocommit=True).execute(
            "select count(*) from raw_jobs where status <> 'completed'").fetchone()
    rate = float(tps.group(1)) * raw.CLAIM if tps else 0.0
    return {"shape": "raw (pgbench -c 4 -j 2)", "rate": rate, "ok": left == (0,), "loops": 4,
            "cpu": _cpu(sampler.samples, lo, hi), "waits": _waits(sampler.waits, lo, hi),
            "states": {}, "worker_samples": 0}


def measure(cluster: BenchCluster, shape: str, n: int, every: float, claimers: int = 0,
            python: str = sys.executable) -> dict[str, Any]:
    if shape == "raw":
        return measure_raw(cluster, n, every)
    with cluster.database("jobkit") as url:
        subprocess.run([sys.executable, "-I", "-c", FILL.format(bench=str(DRIVER.parent)), url, str(n)],
                       check=True)
        code = CHILD.format(bench=str(DRIVER.parent))
        child = subprocess.Popen([python, "-I", "-c", code, url, shape, str(every), str(claimers)],
                                 stdout=subprocess.PIPE, text=True)
        sampler = Sampler(url, child.pid, every / 1000)
        sampler.start()
        out, _ = child.communicate()
        sampler.stop.set()
        sampler.join()
        if child.returncode:
            raise RuntimeError(f"the drain failed ({child.returncode})")
        res = json.loads(out.strip().splitlines()[-1])
    lo, hi = res["first"], res["end"]
    states = res["states"]
    samples = max(states.pop("samples", 0), 1)
    loops = states.pop("loops", 1)
    label = f"{shape}, claimers={claimers}" if claimers else shape
    label += "" if python == sys.executable else f" ({python})"
    return {"shape": label, "rate": n / (hi - lo), "ok": res["seen"] == n,
            "cpu": _cpu(sampler.samples, lo, hi), "waits": _waits(sampler.waits, lo, hi),
            "states": {k: v / samples for k, v in states.items()}, "worker_samples": samples, "loops": loops}


def report(res: dict[str, Any]) -> None:
    print(f"\n== {res['shape']}: {res['rate']:,.0f} jobs/s ({'ok' if res['ok'] else 'NOT ALL DRAINED'}); "
          f"claim loops {res['loops']}; "
          f"load {os.getloadavg()[0]:.2f}")
    print("   on a CPU / runnable waiting for one, share of the drain's time: "
          + ", ".join(f"{k} {v[0]:.2f} / {v[1]:.2f}" for k, v in res["cpu"].items()))
    own = sum(v[0] for k, v in res["cpu"].items() if k.startswith(("client", "all backends")))
    if own:
        print(f"   the drain's own processes on a CPU: {own:.2f} cores; jobs per CPU-second of them: "
              f"{res['rate'] / own:,.0f}")
    print("   backends per sample: " + ", ".join(f"{k} {v:.2f}" for k, v in res["waits"].items()))
    print(f"   worker, share of {res['worker_samples']} samples (sums: mean per sample):")
    for k, v in res["states"].items():
        print(f"     {v:8.2f}  {k}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.drain_idle")
    ap.add_argument("--n", type=int, default=20000, help="jobs per drain")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shapes", default="defaults,fixed", help="of raw, defaults, fixed")
    ap.add_argument("--every", type=float, default=5.0, help="ms between samples")
    ap.add_argument("--claimers", default="0",
                    help="comma-separated Drainer(claimers=K) to measure each shape with (0: its default)")
    ap.add_argument("--python", action="append", default=[],
                    help="also drain with this interpreter's jobkit (say, --ref's venv that `python -m bench "
                         "--baseline REF` built: ~/.cache/jobkit-bench/SHA/venv/bin/python)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = []
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with BenchCluster(echo=lambda _s: None).start() as cluster:
        for _ in range(args.rounds):
            for shape in args.shapes.split(","):
                for claimers in args.claimers.split(",") if shape != "raw" else ["0"]:
                    for python in [sys.executable, *args.python] if shape != "raw" else [sys.executable]:
                        res = measure(cluster, shape, args.n, args.every, int(claimers), python)
                        report(res)
                        results.append(res)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
