"""`python -m bench.flows [--jobs N] [--rounds R] [--steps S]`: what job graphs cost (issue 25).

In a cluster of its own (pg_stat_statements preloaded), side by side in one run:

1. **Insert.** ``jobkit.enqueue_many`` of N (10,000) plain jobs against ``jobkit.gather`` of N jobs
   plus one fan-in callback (N + 1 jobs, N edges), and a fan-out 1 -> N (``jobkit.flow``: one root,
   N children, N edges). Wall time of each call, median of R rounds, alternating; target <= 1.5x.
2. **Release.** Completing the fan-out's root releases its N children in the root's completion
   statement (complete_jobs -> _settle_children); completing the N items of the gather in batches
   of 100 (as a worker's group commit does) counts down the callback. Each against completing as
   many plain jobs the same way.
3. **Steps.** bench.steps' measure: a 10-step durable job's database time against one plain job's
   (target <= 3x), from the same cluster, ``--step-rounds`` times (the ratio moves with the load).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from .cluster import BenchCluster
from .common import execute


def _timed(fn: Callable[[], Any]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def _insert_round(url: str, n: int) -> dict[str, float]:
    import jobkit
    from jobkit.connector import Database
    from jobkit.jobs import NewJob

    out = {}
    with Database(url).session() as s:
        plain = [NewJob("bench.plain", {"i": i}) for i in range(n)]
        items = [NewJob("bench.item", {"i": i}) for i in range(n)]  # both lists built before the clock
        out["enqueue_many"] = _timed(lambda: jobkit.enqueue_many(s, plain))
        out["gather"] = _timed(lambda: jobkit.gather(s, items, NewJob("bench.done", {})))

        def fan_out() -> None:
            graph = jobkit.Flow("fan-out")
            root = graph.add("bench.root", {})
            for i in range(n):
                graph.add("bench.child", {"i": i}, after=[root])
            jobkit.flow(s, graph)
        out["fan_out"] = _timed(fan_out)
    execute(url, "truncate jobkit.jobs, jobkit.job_edges, jobkit.flows")
    return out


def _complete_all(url: str, job_type: str, batch: int) -> float:
    """Claim and complete every due job of the type, ``batch`` at a time; the completions' time."""
    from datetime import timedelta

    from jobkit.connector import Database
    from jobkit.lifecycle import Lifecycle

    took = 0.0
    with Database(url).session() as s:
        life = Lifecycle(s)
        while claimed := life.claim(job_type, batch, "bench", timedelta(minutes=5)):
            done = [(c.id, c.attempts, None) for c in claimed]
            took += _timed(lambda d=done: life.complete(d))  # type: ignore[misc]
    return took


def _release(url: str, n: int) -> dict[str, float]:
    import jobkit
    from jobkit.connector import Database
    from jobkit.jobs import NewJob

    with Database(url).session() as s:
        jobkit.enqueue_many(s, [NewJob("bench.plain", {}) for _ in range(n)])
        graph = jobkit.Flow("fan-out")
        root = graph.add("bench.root", {})
        for _ in range(n):
            graph.add("bench.child", {}, after=[root])
        jobkit.flow(s, graph)
        jobkit.gather(s, [NewJob("bench.item", {}) for _ in range(n)], NewJob("bench.done", {}))
    out = {"plain_x100": _complete_all(url, "bench.plain", 100),
           "root": _complete_all(url, "bench.root", 1),
           "items_x100": _complete_all(url, "bench.item", 100)}
    with Database(url).session() as s:
        pending = "select count(*) from jobkit.jobs where type = %s and status = 'pending'"
        assert s.scalar(pending, ("bench.child",)) == n and s.scalar(pending, ("bench.done",)) == 1
    execute(url, "truncate jobkit.jobs, jobkit.job_edges, jobkit.flows")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.flows")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--step-jobs", type=int, default=2000)
    ap.add_argument("--step-rounds", type=int, default=3, help="plain then durable drains, this many times")
    args = ap.parse_args()
    from .steps import measure

    extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
    with BenchCluster(extra=extra) as cluster, cluster.database("jobkit") as url:
        execute(url, "create extension pg_stat_statements")
        _insert_round(url, 1000)  # warm-up
        rounds = [_insert_round(url, args.jobs) for _ in range(args.rounds)]
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        release = _release(url, args.jobs)
        steps = [measure(url, args.step_jobs, args.steps, 16) for _ in range(args.step_rounds)]
    n = args.jobs
    ratios = sorted(r["gather"] / r["enqueue_many"] for r in rounds)
    print(f"Insert, median of {args.rounds} rounds (each: enqueue_many, gather, fan-out in turn):")
    print(f"  enqueue_many of {n:,} plain jobs        {med['enqueue_many'] * 1000:8.1f} ms")
    print(f"  gather of {n:,} + 1 fan-in callback     {med['gather'] * 1000:8.1f} ms  "
          f"x{med['gather'] / med['enqueue_many']:.2f} (target <= 1.5x); per round "
          f"median x{statistics.median(ratios):.2f}, x{ratios[0]:.2f}-x{ratios[-1]:.2f}")
    print(f"  flow: fan-out 1 -> {n:,}               {med['fan_out'] * 1000:8.1f} ms  "
          f"x{med['fan_out'] / med['enqueue_many']:.2f}")
    print("Release (completion statements' wall time):")
    print(f"  {n:,} plain jobs completed 100 at a time   {release['plain_x100'] * 1000:8.1f} ms")
    print(f"  {n:,} gather items completed 100 at a time {release['items_x100'] * 1000:8.1f} ms  "
          f"x{release['items_x100'] / release['plain_x100']:.2f} (the callback counted down)")
    print(f"  the fan-out's root completed, releasing {n:,} children: {release['root'] * 1000:8.1f} ms")
    print(f"Steps ({args.step_jobs:,} jobs, concurrency 16), database time per job, {args.step_rounds} runs:")
    for one in steps:
        plain, durable = one["plain"]["db_ms_per_job"], one["durable"]["db_ms_per_job"]
        print(f"  plain {plain * 1000:7.1f} us/job, {args.steps}-step durable {durable * 1000:7.1f} us/job: "
              f"x{durable / plain:.2f} (target <= 3x)")
    step_ratios = sorted(o["durable"]["db_ms_per_job"] / o["plain"]["db_ms_per_job"] for o in steps)
    print(f"  median x{statistics.median(step_ratios):.2f}")


if __name__ == "__main__":
    main()
