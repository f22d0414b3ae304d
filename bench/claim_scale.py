"""`python -m bench.claim_scale [--small 10000] [--large 1000000] [--rounds 8] [--claims 20]`: claim
cost with a large pending backlog against a small one (issue 23, target <= 1.3x).

Two databases on one cluster (fsync on), filled with ``--small`` and ``--large`` due jobs (one
INSERT ... SELECT, then VACUUM ANALYZE, as bench.jk_extra.claim_cost fills). Each round times
``--claims`` claims of 50 (the worker's named query, prepared; each batch completed untimed, as a
worker does) on each database in turn, alternating which goes first. Prints the median ms per
database and their ratio, then EXPLAIN (ANALYZE, BUFFERS) of the claim's inner select and the index
sizes on each, so that the ratio can be explained (index depth, pages touched)."""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg
from jobkit.lifecycle import complete_params
from jobkit.queries import queries
from psycopg.rows import dict_row

from .cluster import BenchCluster
from .common import JOB_TYPE
from .jk_extra import _insert

INNER = """explain (analyze, buffers, costs off, timing off, summary off)
select c.id from jobkit.jobs c
where c.type = %(type)s and c.status = 'pending' and c.scheduled_for <= now()
order by c.priority desc, c.scheduled_for limit 50 for update skip locked"""
CALL = """explain (analyze, buffers, costs off, timing off, summary off)
select * from jobkit.claim_jobs(%(type)s, 50, 'bench', interval '5 minutes')"""
SIZES = """select c.relname, pg_relation_size(c.oid) / 8192 as pages
from pg_class c join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'jobkit' and c.relname in ('jobs', 'jobs_pkey', 'jobs_claim_idx') order by 1"""


def timed_claims(conn: psycopg.Connection[Any], claims: int) -> list[float]:
    q = queries("jobkit")
    params = {"type": JOB_TYPE, "limit": 50, "worker": "bench", "lease": timedelta(minutes=5),
              "rate_key": None, "max_attempts": None}
    times = []
    for k in range(claims + 3):
        start = time.perf_counter()
        rows = conn.execute(q["claim"], params).fetchall()  # type: ignore[arg-type]
        elapsed = time.perf_counter() - start
        if k >= 3:
            times.append(elapsed * 1000)
        conn.execute(q["complete"], complete_params([(r["id"], r["attempts"], None) for r in rows]))  # type: ignore[arg-type]
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.claim_scale", description=__doc__)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--claims", type=int, default=20)
    args = ap.parse_args(argv)
    if args.rounds * (args.claims + 3) * 50 > args.small:
        raise SystemExit("--small must exceed rounds * (claims + 3) * 50 jobs: the claims would run it dry")
    times: dict[str, list[float]] = {"small": [], "large": []}
    with BenchCluster() as cluster, cluster.database("jobkit") as small, cluster.database("jobkit") as large:
        urls = {"small": small, "large": large}
        for name, n in (("small", args.small), ("large", args.large)):
            _insert(urls[name], n)
        conns = {k: psycopg.connect(u, autocommit=True, row_factory=dict_row, prepare_threshold=0)
                 for k, u in urls.items()}
        try:
            for r in range(args.rounds):
                for name in (("small", "large") if r % 2 == 0 else ("large", "small")):
                    got = timed_claims(conns[name], args.claims)
                    times[name] += got
                    print(f"round {r + 1} {name}: median {statistics.median(got):.3f} ms", flush=True)
            for name, n in (("small", args.small), ("large", args.large)):
                print(f"\n{name} ({n:,} pending): EXPLAIN of the claim's inner select")
                for row in conns[name].execute(INNER, {"type": JOB_TYPE}).fetchall():
                    print("  " + row["QUERY PLAN"])
                for _ in range(3):
                    plan = [r["QUERY PLAN"] for r in conns[name].execute(CALL, {"type": JOB_TYPE}).fetchall()]
                    buffers = "; ".join(p.strip() for p in plan if "Buffers" in p)
                    print("  claim_jobs(50) as a whole: " + buffers)
                for row in conns[name].execute(SIZES).fetchall():
                    print(f"  {row['relname']}: {row['pages']:,} pages")
        finally:
            for c in conns.values():
                c.close()
    small_ms, large_ms = statistics.median(times["small"]), statistics.median(times["large"])
    print(f"\nclaim 50, median ms: {args.small:,} pending {small_ms:.3f}, "
          f"{args.large:,} pending {large_ms:.3f}, "
          f"ratio {large_ms / small_ms:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
