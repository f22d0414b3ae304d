"""`python -m bench.floors [--n 1000] [--rounds 3]`: what limits a single enqueue (issue 23, stop 33).

One call, one transaction (autocommit, fsync on), one connection, in one run on one cluster, the
figures interleaved round by round so that a shared machine's drift falls on all of them:

- ``select 1``: the round trip alone;
- ``insert``: a bare ``insert into t (type, payload) values (...) returning id`` into a table of four
  columns (a bigserial key, no other index, no trigger, no check) and its commit's WAL flush;
- ``jobkit``: ``jobkit.enqueue(conn, type, payload)``, as the baseline driver calls it;
- ``pgqueuer``: PgQueuer's ``Queries.enqueue`` (bench/pgq.py, its own asyncpg connection).

Prints each figure's median (min-max) in µs per call and calls per second, and the load average
before and after (the machine is shared: read the wall clock with it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable

import psycopg
from psycopg.types.json import Jsonb

from .cluster import BenchCluster, install_jobkit

TABLE = ("create table floor_t (id bigserial primary key, type text not null, payload jsonb not null, "
         "created_at timestamptz not null default now())")
FIGURES = ("select 1", "insert", "jobkit", "pgqueuer")


Call = Callable[[psycopg.Connection[tuple[object, ...]], int], object]


def _psycopg(url: str, n: int, call: Call) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(5):  # prepared after psycopg's threshold, as in steady use
            call(conn, -i)
        start = time.perf_counter()
        for i in range(n):
            call(conn, i)
        return (time.perf_counter() - start) / n


def _select1(url: str, n: int) -> float:
    return _psycopg(url, n, lambda c, _i: c.execute("select 1").fetchone())


def _insert(url: str, n: int) -> float:
    sql = "insert into floor_t (type, payload) values (%s, %s) returning id"
    return _psycopg(url, n, lambda c, i: c.execute(sql, ("bench.floor", Jsonb({"i": i}))).fetchone())


def _jobkit(url: str, n: int) -> float:
    import jobkit

    return _psycopg(url, n, lambda c, i: jobkit.enqueue(c, "bench.floor", {"i": i}))


def _pgqueuer(url: str, n: int) -> float:
    from .pgq import ENTRYPOINT, _queries

    async def main() -> float:
        queries, conn = await _queries(url)
        for i in range(5):
            await queries.enqueue(ENTRYPOINT, json.dumps({"i": -i}).encode(), 0)
        start = time.perf_counter()
        for i in range(n):
            await queries.enqueue(ENTRYPOINT, json.dumps({"i": i}).encode(), 0)
        elapsed = time.perf_counter() - start
        await conn.close()
        return elapsed / n

    return asyncio.run(main())


def _install_floor(url: str) -> None:
    install_jobkit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TABLE)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.floors")
    ap.add_argument("--n", type=int, default=1000, help="calls per figure per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from . import pgq

    runs = {"select 1": _select1, "insert": _insert, "jobkit": _jobkit, "pgqueuer": _pgqueuer}
    per: dict[str, list[float]] = {f: [] for f in FIGURES}
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with BenchCluster(echo=lambda _m: None) as cluster:
        cluster.register("floor", _install_floor)
        cluster.register("pgqueuer", pgq.install)
        for r in range(args.rounds):
            order = FIGURES if r % 2 == 0 else tuple(reversed(FIGURES))
            for figure in order:
                with cluster.database("pgqueuer" if figure == "pgqueuer" else "floor") as url:
                    per[figure].append(runs[figure](url, args.n))
        version = cluster.server_version()
    load1 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Command: `python -m bench.floors --n {args.n} --rounds {args.rounds}`; {version}, fsync on, "
          f"autocommit; load average (1/5/15 min) start {load0}, end {load1}.\n")
    print("| one call, one transaction | µs per call: median (min–max) | calls/s (median) "
          "| ÷ PgQueuer's µs |")
    print("|---|---:|---:|---:|")
    pq = statistics.median(per["pgqueuer"])
    for figure in FIGURES:
        v = per[figure]
        med = statistics.median(v)
        print(f"| {figure} | {med * 1e6:,.0f} ({min(v) * 1e6:,.0f}–{max(v) * 1e6:,.0f}) | {1 / med:,.0f} | "
              f"{med / pq:.2f} |")


if __name__ == "__main__":
    main()
