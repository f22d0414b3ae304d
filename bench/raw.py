"""The raw ceiling: pgbench clients claiming 50 jobs with FOR UPDATE SKIP LOCKED and completing
them, in one transaction, from a table shaped like jobkit.jobs (same columns, defaults, checks,
indexes and storage settings; no trigger, no history rows, no client-side work).

Concurrency c = c pgbench clients (-c c, -j min(c, 2)); "2 processes" = two pgbench threads with
one client each (-c 2 -j 2), what two single-connection workers do at the database."""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from jobkit.ops.localdb import find_pg_bin

from . import verify
from .cluster import install_jobkit
from .common import JOB_TYPE, Sample, execute, scalar
from .systems import PROCS, System

CLAIM = 50
# The claim hands its ids to the completion through a pgbench variable (\gset), so completing goes
# through the primary key whatever other indexes the jobs table has.
SCRIPT = f"""BEGIN;
WITH picked AS MATERIALIZED (
    SELECT id FROM raw_jobs
    WHERE type = '{JOB_TYPE}' AND status = 'pending' AND scheduled_for <= now()
    ORDER BY priority DESC, scheduled_for
    LIMIT {CLAIM}
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE raw_jobs j SET status = 'processing', attempts = j.attempts + 1, started_at = now(),
        lease_expires_at = now() + interval '5 minutes', worker_id = 'w' || :client_id, updated_at = now()
    FROM picked WHERE j.id = picked.id
    RETURNING j.id
)
SELECT coalesce(array_agg(id), '{{}}')::text AS ids FROM claimed
\\gset
UPDATE raw_jobs SET status = 'completed', completed_at = now(), lease_expires_at = NULL, updated_at = now()
WHERE id = ANY (:ids::uuid[]) AND status = 'processing';
COMMIT;
"""


def setup(url: str, n: int) -> None:
    """raw_jobs like jobkit.jobs (the template has jobkit deployed), filled with n pending jobs."""
    execute(url,
            "create table raw_jobs (like jobkit.jobs including all) with ("
            "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02, "
            "autovacuum_analyze_scale_factor = 0.02)",
            f"insert into raw_jobs (type, payload, max_attempts) "
            f"select '{JOB_TYPE}', jsonb_build_object('i', g), 3 from generate_series(1, {n}) g",
            "vacuum (analyze) raw_jobs")


def pgbench(url: str, clients: int, threads: int, transactions: int, script_text: str = SCRIPT) -> float:
    """Run the claim script (``script_text``, else SCRIPT); returns its duration as pgbench reports
    it (transactions / tps, without process start-up and connection time)."""
    u = urlparse(url)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script_text)
        script = Path(f.name)
    try:
        cmd = [str(find_pg_bin() / "pgbench"), "-n", "-M", "prepared", "-f", str(script),
               "-c", str(clients), "-j", str(threads), "-t", str(transactions),
               "-h", u.hostname or "127.0.0.1", "-p", str(u.port), "-U", u.username or "postgres",
               u.path.lstrip("/")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    finally:
        script.unlink(missing_ok=True)
    done = re.search(r"number of transactions actually processed: (\d+)", proc.stdout)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", proc.stdout)
    if proc.returncode != 0 or not done or not tps:
        raise RuntimeError(f"pgbench failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return int(done.group(1)) / float(tps.group(1))


def drain_clients(url: str, n: int, clients: int, threads: int) -> Sample:
    setup(url, n)
    # Enough transactions that the clients together claim everything, plus a few empty ones.
    per_client = math.ceil(n / CLAIM / clients) + 2
    elapsed = pgbench(url, clients, threads, per_client)
    left = int(scalar(url, "select count(*) from raw_jobs where status <> 'completed'"))
    if left:  # a short claim near the end: finish with one client (and count that time)
        elapsed += pgbench(url, 1, 1, math.ceil(left / CLAIM) + 1)
    return Sample(n / elapsed, verify.raw(url, n), {"pgbench": f"-c {clients} -j {threads} -t {per_client}"})


SYSTEM = System(
    key="raw", name="raw SQL ceiling (pgbench)",
    settings=(f"pgbench -M prepared; each transaction claims {CLAIM} with FOR UPDATE SKIP LOCKED (UPDATE to "
              "processing, RETURNING the ids into a pgbench variable) and completes them (UPDATE to "
              "completed by primary key) before COMMIT; table `raw_jobs (LIKE "
              "jobkit.jobs INCLUDING ALL)`; concurrency c = c clients; "
              f"{PROCS} processes = -c {PROCS} -j {PROCS}."),
    install=install_jobkit,  # raw_jobs is created LIKE jobkit.jobs
    drain=lambda url, n, c: drain_clients(url, n, c, min(c, 2)),
    drain_procs=lambda url, n: drain_clients(url, n, PROCS, PROCS),
)
