"""Concurrency keys (issue 14): claim cost and drain throughput of a fair job type whose jobs are
spread over 50 or 5,000 keys, against the same type without keys (the plain claim). Fair claims
serve keys round-robin under the type's advisory lock; the rows show what that costs."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import psycopg
from jobkit.lifecycle import complete_params
from jobkit.queries import queries
from psycopg.rows import dict_row

from . import jk, verify
from .common import JOB_TYPE, DrainConfig, Sample, execute, median, percentile
from .verify import Tally

#: (metric suffix, keys): 0 = keys off (the type is not fair, the jobs carry no key).
SHAPES = (("off", 0), ("50", 50), ("5000", 5000))
DRAIN = DrainConfig(16)


def make_fair(url: str, per_key: int | None = None) -> None:
    """bench.noop as a fair type (round-robin claims, optional max_running_per_key)."""
    execute(url, f"""insert into jobkit.job_types (type, max_attempts, lease, backoff_base, backoff_factor,
                       backoff_cap, backoff_jitter, fair, max_running_per_key)
                     select '{JOB_TYPE}', max_attempts, lease, backoff_base, backoff_factor, backoff_cap,
                            backoff_jitter, true, {per_key if per_key else 'null'}
                     from jobkit.job_types where type = '*'""")


def fill(url: str, n: int, keys: int) -> None:
    """``n`` due jobs, key ``k<i mod keys>`` (no key when ``keys`` is 0), in INSERT ... SELECTs."""
    key = f"'k' || (g % {keys})" if keys else "null"
    for lo in range(0, n, 200_000):
        execute(url, f"insert into jobkit.jobs (type, payload, max_attempts, concurrency_key) "
                     f"select '{JOB_TYPE}', jsonb_build_object('i', g), 3, {key} "
                     f"from generate_series({lo}, {min(n, lo + 200_000) - 1}) g")
    execute(url, "vacuum (analyze) jobkit.jobs")


def claim_cost(url: str, due: int, keys: int, claims: int = 100, limit: int = 50) -> Sample:
    """Median ms of one claim_jobs(limit) round trip with ``due`` jobs over ``keys`` keys (0: keys
    off); each batch is then completed (untimed), as a worker would."""
    if keys:
        make_fair(url)
    fill(url, due, keys)
    q = queries("jobkit")
    params = {"type": JOB_TYPE, "limit": limit, "worker": "bench", "lease": timedelta(minutes=5),
              "rate_key": None, "max_attempts": None}
    times: list[float] = []
    claimed = 0
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=0) as conn:
        for k in range(claims + 5):
            start = time.perf_counter()
            rows = conn.execute(q["claim"], params).fetchall()  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            if k >= 5:  # the first claims warm the plan cache
                times.append(elapsed * 1000)
            conn.execute(q["complete"],  # type: ignore[arg-type]
                         complete_params([(r["id"], r["attempts"], None) for r in rows]))
            claimed += len(rows)
    check = verify.jobkit_claimed(url, claimed, expected=(claims + 5) * limit, pending=due - claimed)
    return Sample(median(times), check, {"p95_ms": percentile(times, 95), "keys": keys, "due": due})


#: The capped drain: 50 keys, at most 2 jobs of a key running at once (at most 100 in all).
CAPPED = ("50cap", 50, 2)


def drain(url: str, n: int, keys: int, per_key: int | None = None) -> Sample:
    """Drain ``n`` jobs over ``keys`` keys (0: keys off) with one Drainer at concurrency 16, at most
    ``per_key`` of a key running at once (None: no limit); jobs/s."""
    if keys:
        make_fair(url, per_key)
    fill(url, n, keys)
    tally = Tally()
    elapsed = asyncio.run(jk.drain_async(url, DRAIN, tally))
    return Sample(n / elapsed, verify.jobkit(url, n, tally),
                  {"config": DRAIN.describe(), "keys": keys, "max_running_per_key": per_key})
