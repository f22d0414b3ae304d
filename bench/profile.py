"""Where a jobkit drain spends its time: `python -m bench.profile [--jobs N] [--concurrency C]
[--batch B] [--backlog M] [--html out.html]`.

Profiles one Drainer draining N no-op jobs with pyinstrument (the worker's Python side), times
each backend call as the worker sees it (round trip plus event-loop delay), and lists the server's
own statement times from pg_stat_statements (preloaded in this run's own cluster).
``--backlog`` first adds M completed jobs to the table (a week of retained history)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import jk
from .cluster import BenchCluster
from .common import JOB_TYPE, DrainConfig, execute
from .verify import Tally, jobkit


class Timed:
    """Wraps a backend: total seconds and calls per method."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed


async def _drain(url: str, config: DrainConfig, tally: Tally, html: Path | None) -> None:
    from jobkit.worker.backends.postgres import PostgresBackend
    from jobkit.worker.drain import Drainer
    from pyinstrument import Profiler

    backend = PostgresBackend(url, max_size=4)
    await backend.open()
    timed = Timed(backend)
    drainer = Drainer(jk.registry(tally), timed, concurrency=config.concurrency,  # type: ignore[arg-type]
                      batch_size=config.batch_size, prefetch=config.effective_prefetch)
    profiler = Profiler(interval=0.0005, async_mode="enabled")
    start = time.perf_counter()
    profiler.start()
    await drainer.drain(JOB_TYPE)
    profiler.stop()
    elapsed = time.perf_counter() - start
    await drainer.shutdown()
    await backend.close()
    n = tally.calls
    print(f"drained {n:,} jobs in {elapsed:.2f}s = {n / elapsed:,.0f} jobs/s ({config.describe()})")
    for name in sorted(timed.seconds):
        s, c = timed.seconds[name], timed.calls[name]
        print(f"  backend.{name:<9} {c:>6} calls, {s * 1000 / c:7.2f} ms avg, {s:6.2f}s total "
              f"(round trips overlap the Python work)")
    print(profiler.output_text(unicode=True, color=False, show_all=False, short_mode=True)[:12000])
    if html:
        html.write_text(profiler.output_html())
        print(f"wrote {html}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.profile")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--backlog", type=int, default=0, help="completed jobs already in the table")
    ap.add_argument("--html", type=Path, default=None)
    args = ap.parse_args()
    config = DrainConfig(args.concurrency, args.batch)
    extra = {"shared_preload_libraries": "pg_cron,pg_stat_statements"}
    with BenchCluster(extra=extra) as cluster, cluster.database("jobkit") as url:
        execute(url, "create extension pg_stat_statements")
        if args.backlog:
            execute(url, "insert into jobkit.jobs (type, payload, status, attempts, completed_at) select "
                         f"'old', '{{}}', 'completed', 1, now() from generate_series(1, {args.backlog})",
                    "vacuum analyze jobkit.jobs")
        jk.fill(url, args.jobs)
        execute(url, "select pg_stat_statements_reset()")
        tally = Tally()
        asyncio.run(_drain(url, config, tally, args.html))
        if not args.backlog:
            print(jobkit(url, args.jobs, tally).detail)
        server_side(url)


def server_side(url: str) -> None:
    """The statements the drain ran, by total server time (pg_stat_statements, nested included)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("""select calls, total_exec_time, mean_exec_time, rows,
                                      regexp_replace(left(query, 70), '\\s+', ' ', 'g')
                               from pg_stat_statements where dbid = (select oid from pg_database
                               where datname = current_database())
                               order by total_exec_time desc limit 12""").fetchall()
    print("server side (pg_stat_statements, top-level statements):")
    for calls, total, mean, nrows, query in rows:
        print(f"  {calls:>6} calls {total / 1000:6.2f}s total {mean:7.3f} ms avg {nrows:>7} rows  {query}")


if __name__ == "__main__":
    main()
