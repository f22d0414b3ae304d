"""Server instructions per job: `python -m bench.callgrind [--ref REF ...] [--n N] [--ops single,bulk,drain]
[--top K]`

Wall time on a shared 2-core machine moves by 2x between repeats; instruction counts do not. Each
side (the working tree, and each REF built as `--baseline` builds it) is deployed into its own
cluster, which is then stopped; every operation runs in PostgreSQL's single-user mode (`postgres
--single`, one statement a line, each its own transaction, committed with fsync on) under valgrind's
callgrind, twice: once with a few warm-up operations and once with N more, each time on a fresh copy
of the deployed data directory. The difference, divided by the jobs the extra operations made,
claimed or completed, is the backend's instructions per job (parse, plan, execute, commit; no client
and no network). With ``--top`` the biggest inclusive costs of the longer run are listed per
operation (callgrind_annotate), which is how the CHECK constraints' and the trigger's shares were
found.

Operations, each as the Python client sends it (prepared once, executed N times):
- single: ``enqueue(type, payload, priority)`` (the enqueue_plain query), one job a statement;
- bulk: ``enqueue_json`` of 1,000 jobs with one type string (the enqueue_many query), per statement;
- drain: ``claim_jobs(type, 100, ...)`` then ``complete_jobs`` of what it claimed, two statements
  (two transactions) per 100 jobs, over a table filled beforehand;
- emit: ``jobkit.emit(name, key, data)``, one event a statement, each with a key of its own (with
  ``--setup`` inserting an ``event_config`` row, each emit also enqueues its subscribers' jobs);
- emitbulk: ``jobkit._emit_many`` of 1,000 events with keys of their own per statement (what a row
  trigger with ``emit`` calls for a 1,000-row statement), per event;
- steps: ``save_steps`` of 16 durable steps' records (one step of each of 16 running jobs, a small
  JSON result each, as the worker's group commit sends them), per record; stepsq: the same records
  in the PostgreSQL backend's own statement (the worker query save_steps_direct);
- gather: ``create_flow`` of a gather as ``jobkit.gather`` sends it (1,000 jobs and a fan-in
  callback after all of them, ``p_fan_in``, the types as a JSON array), per job; compare with bulk."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .baseline import installer
from .baseline_venv import Side, add_ref_option, measured_sides
from .cluster import BenchCluster
from .common import JOB_TYPE

BULK = 1_000
BATCH = 100
STEPS = 16  # records per save_steps statement (the worker's group commit at concurrency 16)
WARM = 3
# a prepared statement is planned anew for its first five executions, then its generic plan is
# built and compared: warm-ups past that, so that the difference is the steady state
WARM_PLANNED = 8

PREPARE = {
    "single": "prepare op(text, jsonb, int) as select jobkit.enqueue($1, $2, $3)",
    "bulk": ("prepare op(jsonb, int) as select count(*) from jobkit.enqueue_json("
             "$1, (select jsonb_agg(jsonb_build_object('n', g)) from generate_series(1, $2) g))"),
    "emit": "prepare op(text) as select jobkit.emit('bench.event', $1, '{\"n\": 1}')",
    "emitbulk": ("prepare op(text, int) as select cardinality(jobkit._emit_many('bench.event', "
                 "array(select $1 || '.' || g from generate_series(1, $2) g), "
                 "array(select jsonb_build_object('n', g) from generate_series(1, $2) g)))"),
    "drain": ("prepare claim(int) as select set_config('bench.claimed', coalesce((select jsonb_agg("
              "jsonb_build_array(c.id, c.attempts)) from jobkit.claim_jobs('" + JOB_TYPE + "', $1, 'w', "
              "'5 min') c), '[]')::text, false)"),
    "steps": ("prepare op(uuid[], int[], text[], int[], jsonb, text[], int[], timestamptz[]) as "
              "select count(*) from jobkit.save_steps($1, $2, $3, $4, $5, $6, $7, $8, false)"),
    # the PostgreSQL backend's own statement for the same records (worker query save_steps_direct)
    "stepsq": "prepare op(uuid[], int[], text[], int[], jsonb, text[], int[], timestamptz[]) as ",
    # the types are a constant of the prepared statement; the payloads are built as bulk's are
    "gather": ("prepare op(int) as select count(*) from jobkit.create_flow(null, "
               "'[" + ",".join(['"bench.item"'] * BULK + ['"bench.done"']) + "]', "
               "(select jsonb_agg(jsonb_build_object('n', g)) from generate_series(1, $1 + 1) g), "
               "'{}', '{}', p_fan_in => true)"),
}
CLAIMED = "jsonb_array_elements(current_setting('bench.claimed')::jsonb) e"
DONE = ("prepare done as select count(*) from jobkit.complete_jobs("
        f"(select array_agg((e ->> 0)::uuid) from {CLAIMED}), "
        f"(select array_agg((e ->> 1)::int) from {CLAIMED}), null)")


# Issue 23's raw ceiling (bench/raw.py's statements; the ids go through a setting instead of a pgbench
# variable) on jobkit.jobs (rawjobs) or on its columns with only a primary key and the claim index
# (rawmin), and claim_jobs + complete_jobs of 50 in one transaction (fn1) or two (fn2): per job.
RAW_BATCH = 50
RAW_TABLES = {"rawjobs": "jobkit.jobs", "rawmin": "raw_min"}
RAW_MIN = ("create table raw_min (like jobkit.jobs including defaults); "
           "alter table raw_min add primary key (id); "
           "create index raw_min_claim_idx on raw_min (type, priority desc, scheduled_for) "
           "where status = 'pending'; insert into raw_min select * from jobkit.jobs; "
           "vacuum (analyze) raw_min; checkpoint")


def _raw_prepare(table: str) -> str:
    return (f"prepare claim as with picked as materialized (select id from {table} where type = '{JOB_TYPE}' "
            "and status = 'pending' and scheduled_for <= now() order by priority desc, scheduled_for "
            f"limit {RAW_BATCH} for update skip locked), "
            f"claimed as (update {table} j set status = 'processing', "
            "attempts = j.attempts + 1, started_at = now(), lease_expires_at = now() + interval '5 minutes', "
            "worker_id = 'w1', updated_at = now() from picked where j.id = picked.id returning j.id) "
            "select set_config('bench.claimed', coalesce(array_agg(id), '{}')::text, false) from claimed\n"
            f"prepare done as update {table} set status = 'completed', completed_at = now(), "
            "lease_expires_at = null, updated_at = now() "
            "where id = any (current_setting('bench.claimed')::uuid[]) and status = 'processing'")


def _raw_script(op: str, count: int, lines: list[str]) -> tuple[str, int]:
    if op in RAW_TABLES:
        # pgbench's plan at 20,000 jobs (a nested loop over the primary key); at this fill and its
        # statistics the planner hashes the whole table instead (~20,000 instructions a job more)
        lines += ["set enable_hashjoin = off", "set enable_mergejoin = off", _raw_prepare(RAW_TABLES[op])]
    else:
        lines += [PREPARE["drain"], DONE]
    claim = f"execute claim({RAW_BATCH})" if op in ("fn1", "fn2") else "execute claim"
    one = f"{claim}\nexecute done"
    lines += [one if op == "fn2" else f"begin\n{one}\ncommit"] * count
    return "\n".join(lines) + "\n", count * RAW_BATCH


def script(op: str, count: int, setup: str = "") -> tuple[str, int]:
    """The statements for ``count`` operations, and how many jobs they handle."""
    lines = [*filter(None, setup.splitlines())]
    if op in (*RAW_TABLES, "fn1", "fn2"):
        return _raw_script(op, count, lines)
    if op in ("steps", "stepsq"):
        lines += [_running(), ANALYZE, PREPARE[op] + (_direct() if op == "stepsq" else "")]
        lines += [_save_steps(k) for k in range(1, count + 1)]
        return "\n".join(lines) + "\n", count * STEPS
    lines.append(PREPARE[op])
    if op == "single":
        lines += [f"execute op('{JOB_TYPE}', '{{\"n\": 1}}', 0)"] * count
        return "\n".join(lines) + "\n", count
    if op == "emit":
        lines += [f"execute op('k{i}')" for i in range(count)]
        return "\n".join(lines) + "\n", count
    if op == "emitbulk":
        lines += [f"execute op('b{i}', {BULK})" for i in range(count)]
        return "\n".join(lines) + "\n", count * BULK
    if op == "bulk":
        lines += [f"execute op('\"{JOB_TYPE}\"', {BULK})"] * count
        return "\n".join(lines) + "\n", count * BULK
    if op == "gather":
        lines += [f"execute op({BULK})"] * count
        return "\n".join(lines) + "\n", count * (BULK + 1)
    lines.append(DONE)
    lines += [f"execute claim({BATCH})\nexecute done"] * count
    return "\n".join(lines) + "\n", count * BATCH


def _running() -> str:
    """STEPS running jobs with known ids (attempt 1), for the steps operation's literal arguments."""
    return ("insert into jobkit.jobs (id, type, payload, status, attempts, started_at, lease_expires_at, "
            "worker_id) "
            f"select ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, '{JOB_TYPE}', '{{}}', "
            f"'processing', 1, now(), now() + interval '1 hour', 'w' from generate_series(1, {STEPS}) g")


# The running jobs among others (2,000 pending), with statistics: the plans a busy queue gets.
ANALYZE = (f"insert into jobkit.jobs (type, payload) select '{JOB_TYPE}', '{{}}' "
           "from generate_series(1, 2000); analyze jobkit.jobs")


def _direct() -> str:
    """The save_steps_direct worker query on one line, its parameters numbered as save_steps'."""
    from jobkit.queries import queries

    order = ["ids", "attempts", "names", "occurrences", "results", "errors", "tries", "started_at"]
    text = " ".join(ln.split("--")[0] for ln in queries("jobkit")["save_steps_direct"].splitlines())
    for k, name in enumerate(order, 1):
        text = text.replace(f"%({name})s", f"${k}").replace(f"%({name})b", f"${k}")
    # the same statement, its 16 rows counted instead of printed (as the steps operation counts)
    text = text.replace("select h.id, h.attempts from held h", "select count(*) from held h")
    return " ".join(text.split())


def _save_steps(k: int) -> str:
    """The k-th save_steps: step "step" occurrence k of every running job, as the worker sends it
    (array literals, the results as one JSON array, no errors)."""
    ids = ",".join(f"00000000-0000-4000-8000-{g:012d}" for g in range(1, STEPS + 1))
    results = "[" + ",".join(f'{{"i": {g}}}' for g in range(1, STEPS + 1)) + "]"
    ones = ",".join(["1"] * STEPS)
    return (f"execute op('{{{ids}}}', '{{{ones}}}', '{{{','.join(['step'] * STEPS)}}}', "
            f"'{{{','.join([str(k)] * STEPS)}}}', '{results}', null, '{{{ones}}}', "
            f"'{{{','.join(['2026-12-06T12:00:00+00'] * STEPS)}}}')")


def fill_sql(jobs: int) -> str:
    return (f"select count(*) from jobkit.enqueue_json('\"{JOB_TYPE}\"', "
            f"(select jsonb_agg(jsonb_build_object('n', g)) from generate_series(1, {jobs}) g)); "
            "analyze jobkit.jobs; checkpoint;")


class Deployed:
    """One side deployed into a stopped cluster's data directory (``--single`` needs it to itself)."""

    def __init__(self, side: Side, fill: int, prep: str = "") -> None:
        self.side = side
        self.cluster = BenchCluster(echo=lambda _m: None).start()
        self.cluster.register("side", installer(side))
        self.db = self.cluster.template("side")
        if fill:
            self._psql(fill_sql(fill))
        if prep:
            self._psql(prep)
        self.data = self.cluster.local.status().data_dir
        self.cluster.local.stop()

    def _psql(self, sql: str) -> None:
        from jobkit.connector import Database

        with Database(self.cluster.url(self.db)).session() as s:
            for stmt in sql.split(";"):
                if stmt.strip():
                    s.execute(stmt)

    def instructions(self, text: str, out: Path) -> int:
        """Run ``text`` in single-user mode under callgrind on a copy of the data; total Ir."""
        copy = Path(tempfile.mkdtemp(prefix="jk-cg-", dir="/var/tmp"))
        try:
            data = copy / "pgdata"
            subprocess.run(["cp", "-a", str(self.data), str(data)], check=True)
            (copy / "in.sql").write_text(text)
            os.chmod(copy, 0o755)
            os.chown(copy, _uid(), -1)
            cg = copy / "cg.out"
            cmd = ["runuser", "-u", "postgres", "--", "valgrind", "--tool=callgrind",
                   f"--callgrind-out-file={cg}", str(_postgres()), "--single", "-D", str(data),
                   "-c", "shared_preload_libraries=", "-c", "fsync=on", self.db]
            with open(copy / "in.sql") as stdin:
                done = subprocess.run(cmd, stdin=stdin, capture_output=True, text=True, check=False)
            if done.returncode != 0 or "ERROR" in done.stdout or "ERROR" in done.stderr:
                errs = [ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR" in ln]
                raise RuntimeError(f"single-user run failed: {errs[:3] or done.stderr[-500:]}")
            shutil.copy(cg, out)
            return _total(out)
        finally:
            shutil.rmtree(copy, ignore_errors=True)

    def close(self) -> None:
        self.cluster.stop()


def _uid() -> int:
    import pwd

    return pwd.getpwnam("postgres").pw_uid


def _postgres() -> Path:
    from jobkit.ops.localdb import find_pg_bin

    return Path(find_pg_bin()) / "postgres"


def _total(cg: Path) -> int:
    for line in cg.read_text().splitlines():
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {cg}")


def inclusive(cg: Path) -> dict[str, int]:
    """Inclusive instructions per function (recursion levels folded together: the outermost counts)."""
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(cg)],
                          capture_output=True, text=True, check=False)
    costs: dict[str, int] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:([^\s\[']+)", line)
        if m and not m.group(2).startswith("0x"):
            costs[m.group(2)] = max(costs.get(m.group(2), 0), int(m.group(1).replace(",", "")))
    return costs


def top(small: Path, big: Path, jobs: int, k: int) -> list[str]:
    """The k functions whose inclusive cost grew most per extra job."""
    a, b = inclusive(small), inclusive(big)
    diff = sorted(((b[f] - a.get(f, 0)) / jobs, f) for f in b)
    return [f"{per:>12,.0f}  {name}" for per, name in reversed(diff[-k:])]


def measure(dep: Deployed, op: str, n: int, k: int, outdir: Path, setup: str = "") -> tuple[float, list[str]]:
    warm = WARM_PLANNED if op in ("steps", "stepsq") else WARM
    small, jobs_small = script(op, warm, setup)
    big, jobs_big = script(op, warm + n, setup)
    a = dep.instructions(small, outdir / f"{op}-small.cg")
    b = dep.instructions(big, outdir / f"{op}-big.cg")
    jobs = jobs_big - jobs_small
    return (b - a) / jobs, top(outdir / f"{op}-small.cg", outdir / f"{op}-big.cg", jobs, k) if k else []


def _set_records(n: int) -> None:
    global STEPS  # noqa: PLW0603 - the harness's one knob, read by the steps operations' scripts
    STEPS = n


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.callgrind")
    add_ref_option(ap)
    ap.add_argument("--n", type=int, default=200, help="operations beyond the warm-up (bulk/drain: /10)")
    ap.add_argument("--ops", default="single,bulk,drain",
                    help="any of single,bulk,drain,steps,stepsq,gather,rawjobs,rawmin,fn1,fn2")
    ap.add_argument("--top", type=int, default=0, help="list the K biggest inclusive costs")
    ap.add_argument("--setup", default="", help="statements (one a line) run first in both runs, e.g. to "
                    "switch a feature on or a trigger off")
    ap.add_argument("--records", type=int, default=STEPS, help="steps/stepsq: records per statement")
    ap.add_argument("--keep", type=Path, default=None, help="keep the callgrind files here")
    args = ap.parse_args()
    _set_records(args.records)
    sides = measured_sides(args.ref)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        run(args, sides, args.keep)
        return
    with tempfile.TemporaryDirectory(prefix="jk-cg-out-") as tmp:
        run(args, sides, Path(tmp))


def run(args: argparse.Namespace, sides: list[Side], outdir: Path) -> None:
    ops = args.ops.split(",")
    for side in sides:
        for op in ops:
            n = args.n if op in ("single", "emit", "steps", "stepsq") else max(args.n // 10, 2)
            fill = (WARM + n) * BATCH if op == "drain" else 0
            if op in (*RAW_TABLES, "fn1", "fn2"):
                fill = (WARM + n) * RAW_BATCH
            dep = Deployed(side, fill=fill, prep=RAW_MIN if op == "rawmin" else "")
            try:
                per, rows = measure(dep, op, n, args.top, outdir, args.setup)
            finally:
                dep.close()
            print(f"{side.label:40} {op:7} {per:>14,.0f} instructions per job", flush=True)
            for row in rows:
                print("    " + row)


if __name__ == "__main__":
    main()
