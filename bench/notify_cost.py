"""`python -m bench.notify_cost URL [BATCHES] [--listen]`: what 0006's completion notification costs.

On a database with jobkit deployed, this times ``complete_jobs`` on batches of 100 claimed jobs,
alternating batch by batch between 0006's definition (one NOTIFY on ``<schema>_done`` per statement,
sent at commit) and the definition before 0006 (no NOTIFY), installed next to it as
``complete_jobs_before_0006``. Both run in autocommit, so each timing includes the commit that carries
the notification. Alternating on one connection cancels most of a shared machine's drift, which the
drain rows of ``python -m bench`` cannot (they vary by +-30 % between runs there). ``--listen`` adds a
session LISTENing on the channel, as a waiting producer does. Deletes every job of the database.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import psycopg

BEFORE_0006 = """
create or replace function jobkit.complete_jobs_before_0006(p_ids uuid[], p_attempts int[], p_results jsonb[])
returns setof uuid
language plpgsql volatile set search_path = '' as $$
begin
    return query
    update jobkit.jobs j
    set status = 'completed',
        result = case when p_results is null then null else p_results[array_position(p_ids, j.id)] end,
        completed_at = now(), lease_expires_at = null, updated_at = now()
    where j.id = any (p_ids) and j.status = 'processing'
      and j.attempts = p_attempts[array_position(p_ids, j.id)]
    returning j.id;
end
$$
"""
CALLS = {"before": "select * from jobkit.complete_jobs_before_0006(%s, %s, null)",
         "0006": "select * from jobkit.complete_jobs(%s, %s, null)"}


def measure(url: str, batches: int, listen: bool) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"before": [], "0006": []}
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url, autocommit=True) as waiter:
        conn.execute(BEFORE_0006)
        conn.execute("delete from jobkit.jobs")
        if listen:
            waiter.execute("listen jobkit_done")
        conn.execute("select jobkit.enqueue_json('\"notify_cost\"', (select pg_catalog.jsonb_agg("
                     "'{}'::jsonb) from pg_catalog.generate_series(1, %s)))", (batches * 200,))
        try:
            for i in range(batches * 2):
                rows: list[Any] = conn.execute("select id, attempts from jobkit.claim_jobs("
                                               "'notify_cost', 100, 'bench', '1 minute')").fetchall()
                variant = ("before", "0006")[(i + i // 2) % 2]  # before, 0006, 0006, before, ...
                started = time.perf_counter()
                done = conn.execute(CALLS[variant], ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
                times[variant].append(time.perf_counter() - started)
                assert len(done) == 100
                if listen:
                    for _note in waiter.notifies(timeout=0.0):
                        pass
        finally:
            conn.execute("drop function jobkit.complete_jobs_before_0006(uuid[], int[], jsonb[])")
            conn.execute("delete from jobkit.jobs")
    return times


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    batches = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 300
    listen = "--listen" in argv
    times = measure(argv[0], batches, listen)
    before, after = statistics.median(times["before"]), statistics.median(times["0006"])
    print(f"complete_jobs, 100 jobs per statement, {batches} statements each, "
          f"{'one session listening' if listen else 'nobody listening'}:")
    print(f"  before 0006: median {before * 1000:.3f} ms   0006: median {after * 1000:.3f} ms   "
          f"difference {(after - before) * 1000:+.3f} ms per statement "
          f"({(after / before - 1) * 100:+.1f} %), {(after - before) * 1e6 / 100:+.2f} us per job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
