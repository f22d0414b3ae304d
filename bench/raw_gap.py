"""`python -m bench.raw_gap [--n 20000] [--rounds 3] [--clients 4]`: the gap between jobkit at its
defaults and the raw claim-50 ceiling, in steps (issue 23, stop 34).

One cluster, one database per measurement (a copy of the deployed template), the variants visited in
turn and in reverse order every other round so that a noisy machine hits them alike:

- raw: bench/raw.py as `python -m bench` runs it: pgbench, 4 clients, claim 50 + complete in one
  transaction, on ``raw_jobs (LIKE jobkit.jobs INCLUDING ALL)`` (jobs' columns, CHECKs, indexes);
- rawmin: the same on jobs' columns and defaults with only the primary key and the claim index
  (what jobs' other nine indexes and twelve CHECKs cost the ceiling itself);
- jobs: the same raw SQL on the deployed ``jobkit.jobs`` (its trigger, its statistics target);
- fn1: ``claim_jobs(type, 50, ...)`` and ``complete_jobs`` of what it claimed, one transaction,
  4 pgbench clients (jobkit's functions without a Python worker);
- fn2: the same in two transactions (claim, then complete), as the worker sends them;
- fixed: one Drainer, concurrency 16, batch 100, prefetch 25 (`python -m bench`'s fixed window);
- drainer: one Drainer at its defaults (``Drainer(concurrency=16)``, the adaptive window).

Prints each variant's median jobs/s (min-max) and its share of raw's median."""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Callable

from . import jk, raw
from .cluster import BenchCluster, install_jobkit
from .common import JOB_TYPE, DrainConfig, execute, scalar

CLAIM = raw.CLAIM
RAW_TABLE = ("create table raw_jobs (like jobkit.jobs including all) with ("
             "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02, "
             "autovacuum_analyze_scale_factor = 0.02)")  # as raw.setup makes it
MIN_TABLE = (
    "create table raw_min (like jobkit.jobs including defaults) with ("
    "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02, "
    "autovacuum_analyze_scale_factor = 0.02)",
    "alter table raw_min add primary key (id)",
    "create index raw_min_claim_idx on raw_min (type, priority desc, scheduled_for) where status = 'pending'",
)
FN_CLAIM = ("SELECT coalesce(array_agg(id), '{}')::text AS ids, "
            "coalesce(array_agg(attempts), '{}')::text "
            f"AS att FROM jobkit.claim_jobs('{JOB_TYPE}', {CLAIM}, 'w' || :client_id, interval '5 minutes')\n"
            "\\gset\n")
FN_DONE = "SELECT count(*) FROM jobkit.complete_jobs(:ids::uuid[], :att::int[], null);\n"
SCRIPTS = {
    "raw": raw.SCRIPT,
    "rawmin": raw.SCRIPT.replace("raw_jobs", "raw_min"),
    "jobs": raw.SCRIPT.replace("raw_jobs", "jobkit.jobs"),
    "fn1": "BEGIN;\n" + FN_CLAIM + FN_DONE + "COMMIT;\n",
    "fn2": FN_CLAIM + FN_DONE,
}
TABLES = {"raw": "raw_jobs", "rawmin": "raw_min", "jobs": "jobkit.jobs",
          "fn1": "jobkit.jobs", "fn2": "jobkit.jobs"}


def fill_sql(variant: str, n: int) -> list[str]:
    """The statements that put n pending jobs in the variant's table, inserted as raw.setup does,
    then VACUUM (ANALYZE)."""
    table = TABLES[variant]
    made = {"raw": [RAW_TABLE], "rawmin": list(MIN_TABLE)}.get(variant, [])
    return [*made, f"insert into {table} (type, payload, max_attempts) "
                   f"select '{JOB_TYPE}', jsonb_build_object('i', g), 3 from generate_series(1, {n}) g",
            f"vacuum (analyze) {table}"]


def fill(url: str, variant: str, n: int) -> None:
    execute(url, *fill_sql(variant, n))


def pgbench_drain(url: str, variant: str, n: int, clients: int) -> float:
    """Fill, then drain with ``clients`` pgbench clients; jobs/s (pgbench's own durations)."""
    fill(url, variant, n)
    script = SCRIPTS[variant]
    elapsed = raw.pgbench(url, clients, min(clients, 2), math.ceil(n / CLAIM / clients) + 2, script)
    table = TABLES[variant]
    left = int(scalar(url, f"select count(*) from {table} where status <> 'completed'"))
    if left:  # a short claim near the end: finish with one client (and count that time)
        elapsed += raw.pgbench(url, 1, 1, math.ceil(left / CLAIM) + 1, script)
    done = int(scalar(url, f"select count(*) from {table} where status = 'completed'"))
    if done != n:
        raise RuntimeError(f"{variant}: {done} of {n} jobs completed")
    return n / elapsed


def drainer(url: str, n: int, fixed: bool) -> float:
    sample = jk.drain(url, n, DrainConfig(16, 100, 25)) if fixed else jk.drain_defaults(url, n)
    if not sample.ok or sample.value is None:
        raise RuntimeError(f"drain failed its check: {sample.check}")
    return sample.value


def runner(variant: str, clients: int) -> Callable[[str, int], float]:
    if variant in ("fixed", "drainer"):
        return lambda url, n: drainer(url, n, variant == "fixed")
    return lambda url, n: pgbench_drain(url, variant, n, clients)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.raw_gap")
    ap.add_argument("--n", type=int, default=20_000, help="jobs per measurement")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4, help="pgbench clients")
    ap.add_argument("--variants", default="raw,rawmin,jobs,fn1,fn2,fixed,drainer")
    args = ap.parse_args()
    variants = args.variants.split(",")
    results: dict[str, list[float]] = {v: [] for v in variants}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with BenchCluster(echo=lambda _m: None) as cluster:
        cluster.register("jobkit", install_jobkit)
        for r in range(args.rounds):
            for variant in (variants if r % 2 == 0 else variants[::-1]):
                with cluster.database("jobkit") as url:
                    results[variant].append(runner(variant, args.clients)(url, args.n))
                print(f"round {r + 1} {variant:8} {results[variant][-1]:>10,.0f} jobs/s", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = statistics.median(results[variants[0]])
    print(f"| variant | jobs/s: median (min-max) | of {variants[0]} |\n|---|---:|---:|")
    for v in variants:
        med = statistics.median(results[v])
        print(f"| {v} | {med:,.0f} ({min(results[v]):,.0f}-{max(results[v]):,.0f}) | {med / base:.0%} |")


if __name__ == "__main__":
    main()
