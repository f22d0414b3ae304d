"""The results as markdown (printed and written to docs/BENCHMARKS.md) and the drain plot."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from . import targets
from .runner import Results
from .systems import PROC_CONCURRENCY, PROCS

METHOD = """\
- **Cluster**: `python -m bench` starts its own PostgreSQL with jobkit's `LocalCluster` (fsync on,
  synchronous_commit on) in a temp dir, applies the settings listed above to every system alike,
  and removes it afterwards. Every measurement gets a fresh database copied from a per-system
  template (jobkit deployed with `deploy(..., DeployOptions(schedules=False))`; PgQueuer installed
  with `Queries.install()` + `optimize_autovacuum()`; procrastinate with `apply_schema_async()`).
- **Order**: measurements are interleaved (each measurement runs for every system before the next
  one starts) and the system order rotates every repeat; cells are medians over the repeats. The
  bloat measurement runs once.
- **Enqueue**: single = one job per statement (one commit each) in a loop on one connection;
  bulk = batches of 1,000 per statement. Timed client-side around the loop.
- **Drain**: N jobs are bulk-enqueued first and `ANALYZE`d; timed from the first handler call to the
  moment the drain returns with every completion committed (worker start-up: connections, schema
  checks, LISTEN, excluded for every system). The raw ceiling uses pgbench's own duration
  (transactions / tps, excluding connection time). "2 processes" = two OS processes
  (multiprocessing, spawn) started together behind a barrier.
- **Latency**: a separate process enqueues one job per statement at a fixed rate; the payload holds
  `time.time()` taken just before the enqueue call; the handler records `time.time() - t` when it
  starts. So it includes the enqueue's own commit (WAL flush), the NOTIFY, the wake-up and the claim.
- **Defaults**: jobkit's Drainer exactly as `jobkit worker serve` builds it with no options
  (concurrency 16, the adaptive claim window, a pool of 8); PgQueuer's 16 QueueManagers with
  `QueueManager.run()`'s own default batch size (10). The other drain rows use batch 100 for both.
- **Wake path**: see bench/wake.py. The worker is jobkit's WorkerEndpoint with `worker serve`'s
  defaults, served by uvicorn in the benchmark process; the pg_net stand-in (tests/standins, with
  pg_net 0.20's timing: woken at commit, a 1 s pause between batches) runs in its own process.
  Backlog: N jobs in one statement; jobs/s from that statement's commit until every completion is
  committed, next to a Drainer with the same settings called directly (its `drain()` call to its
  return). Burst and punctuality time each job from its enqueue (or its due time) to its
  handler's start; there is no cron in these runs.
- **Claim cost**: the worker's own named query (`claim_jobs`, prepared) on one connection, 5
  warm-up claims then the timed ones; each claimed batch is completed (untimed) like a worker does.
  The backlog is inserted with one `INSERT ... SELECT` (rows as `enqueue_many` makes them), then
  `VACUUM ANALYZE`.
- **Bloat**: jobs go through in waves (bulk enqueue, then a Drainer at concurrency 16); with prune
  on, the prune schedule's own command (`jobkit.prune`, `jobkit.prune_wakeups`) runs after every
  wave with a zero retention (every finished job is past retention). To compress hours of traffic
  into minutes, autovacuum_naptime is 5 s during this measurement only.
- **Exactly-once**: after every run: every job completed exactly once (jobkit: completed == N,
  none pending/processing/failed, every `attempts` = 1 (each claim counts one) and no row in
  `job_attempts` (which records every attempt that did not complete: a retry, an expired lease, a
  release); PgQueuer: queue empty, N `successful` log rows for N distinct jobs;
  procrastinate: N `succeeded` jobs with attempts = 1 and N `started` events; raw: N rows
  completed with attempts = 1) and the handlers ran N times for N distinct ids. A measurement that
  fails its check is shown as **FAILED** instead of a figure.
- **Noise**: the machine has 2 cores shared with other work (see the load averages); a quick run
  (1 repeat, small N) moves by 10-30% between runs. Prefer the full run's medians.
"""

COMMANDS = """\
```sh
pip install -e '.[dev,bench]'        # the peers, matplotlib and the profilers live in the bench extra
python -m bench                      # full: 3 repeats, N = 20,000 (about 15-20 minutes)
python -m bench --snapshot           # the same on a frozen copy of git HEAD (edits mid-run cannot leak in)
python -m bench --quick              # 1 repeat, smaller N (about 2-3 minutes)
python -m bench --quick --only jobkit --groups drain,claim   # a subset
python -m bench --smoke              # tiny N, jobkit only, writes nothing (< 20 s)
pytest tests/test_bench_smoke.py     # the smoke run as a test (exactly-once only, no timings)
python -m bench.profile --jobs 20000 --concurrency 16   # where a drain's time goes (pyinstrument)
python -m bench.notify_cost URL 300 [--listen]          # the completion NOTIFY's cost (0006)
python -m bench.live_upgrade --rows 1000000            # deploy 0002..head under load: the longest stall
```
"""

NOTES_START, NOTES_END = "<!-- notes:start -->", "<!-- notes:end -->"
DEFAULT_NOTES = "(Hand-written notes: profiling findings and analysis. Kept when the file is regenerated.)"


def rows(results: Results) -> list[tuple[str, str]]:
    p = results.preset
    drains = [(f"drain_c{c}", f"Drain {p.n_drain:,} no-op jobs, concurrency {c} (jobs/s)")
              for c in p.concurrency]
    return [
        ("enqueue_single", f"Enqueue, one job per statement, {p.n_single:,} in a loop (jobs/s)"),
        ("enqueue_bulk", f"Enqueue, bulk 1,000 per statement, {p.n_bulk:,} jobs (jobs/s)"),
        ("enqueue_single_async", f"Enqueue with `await enqueue_async`, {p.n_single:,} in a loop (jobs/s)"),
        ("enqueue_bulk_async", "Enqueue with `await enqueue_many_async`, 1,000 per call (jobs/s)"),
        *drains,
        ("drain_procs", f"Drain {p.n_drain:,}, {PROCS} processes x concurrency {PROC_CONCURRENCY} (jobs/s)"),
        ("drain_defaults", f"Drain {p.n_drain:,}, concurrency 16, each system's defaults (jobs/s)"),
        ("latency_p50", f"Latency enqueue -> handler start, p50 at {p.latency_rate:g} jobs/s (ms)"),
        ("latency_p99", f"Latency enqueue -> handler start, p99 at {p.latency_rate:g} jobs/s (ms)"),
    ]


def cell(results: Results, system: str, metric: str) -> str:
    if results.failed(system, metric):
        return "**FAILED**"
    value = results.value(system, metric)
    if value is None:
        return "—"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def main_table(results: Results) -> str:
    head = "| Measurement | " + " | ".join(s.name for s in results.systems) + " |"
    sep = "|---|" + "---:|" * len(results.systems)
    body = [f"| {label} | " + " | ".join(cell(results, s.key, m) for s in results.systems) + " |"
            for m, label in rows(results)]
    return "\n".join([head, sep, *body])


def claim_table(results: Results) -> str:
    p = results.preset
    small, large, fut = (results.value("jobkit", m) for m in ("claim_small", "claim_large", "claim_future"))
    if small is None and large is None and fut is None:
        return ""

    def ms(metric: str) -> str:
        return cell(results, "jobkit", metric)

    def ratio(x: float | None) -> str:
        return f"{x / small:.2f}x" if x is not None and small else "—"

    return "\n".join([
        "| jobkit.claim_jobs(50), median ms per call | value | vs small backlog |", "|---|---:|---:|",
        f"| {p.claim_small:,} due | {ms('claim_small')} | 1.00x |",
        f"| {p.claim_large:,} due | {ms('claim_large')} | {ratio(large)} |",
        f"| {p.claim_future:,} scheduled a day ahead + {p.claim_small:,} due | {ms('claim_future')} "
        f"| {ratio(fut)} |"])


def keys_table(results: Results) -> str:
    """Concurrency keys (bench/keys.py): fair claims over 50 and 5,000 keys against keys off."""
    p = results.preset
    if all(results.value("jobkit", f"keys_{kind}_{s}") is None
           for kind in ("claim", "drain") for s in ("off", "50", "5000")):
        return ""

    def ratio(metric: str, base: str) -> str:
        x, b = results.value("jobkit", metric), results.value("jobkit", base)
        return f"{x / b:.2f}x" if x is not None and b else "—"

    rows = ["| Concurrency keys | claim 50 (ms, median) | vs keys off | drain c=16 (jobs/s) | vs keys off |",
            "|---|---:|---:|---:|---:|"]
    for suffix, label in (("off", "keys off (plain claim)"), ("50", "50 keys, fair claims"),
                          ("5000", "5,000 keys, fair claims")):
        rows.append(f"| {label} | {cell(results, 'jobkit', f'keys_claim_{suffix}')} "
                    f"| {ratio(f'keys_claim_{suffix}', 'keys_claim_off')} "
                    f"| {cell(results, 'jobkit', f'keys_drain_{suffix}')} "
                    f"| {ratio(f'keys_drain_{suffix}', 'keys_drain_off')} |")
    rows.append(f"| 50 keys, at most 2 running per key (100 in all) | — | — "
                f"| {cell(results, 'jobkit', 'keys_drain_50cap')} "
                f"| {ratio('keys_drain_50cap', 'keys_drain_off')} |")
    rows.append(f"\n{p.claim_small:,} due jobs per claim measurement, {p.n_drain:,} per drain. The capped "
                "row is not a target: its limit allows 100 running jobs, so no-op jobs wait on round trips.")
    return "\n".join(rows)


def wake_table(results: Results) -> str:
    """The path users run (bench/wake.py): backlogs through the wake path, bursts, punctuality."""
    p = results.preset

    def c(metric: str) -> str:
        return cell(results, "jobkit", metric)

    def share(metric: str, n: int) -> str:
        ratio = targets.paired_ratio(results, metric, f"direct_{n}")
        return f"{ratio:.0%}" if ratio else "—"

    rows = [f"| {n:,} jobs in one statement, woken over {t} | {c(f'wake_{t}_{n}')} jobs/s "
            f"| {share(f'wake_{t}_{n}', n)} of the direct Drainer ({c(f'direct_{n}')} jobs/s) |"
            for n in p.backlogs for t in ("pg_net", "notify")]
    rows += [
        f"| {p.burst:,} single-row enqueues in 1 s through pg_net, enqueue -> start | "
        f"p50 {c('burst_p50')} ms, p99 {c('burst_p99')} ms | the worker's default lingering (2 s) |",
        f"| the same burst with `--linger 0s` | p50 {c('burst_nolinger_p50')} ms, "
        f"p99 {c('burst_nolinger_p99')} ms | each later wake-up waits for pg_net's next loop |",
        f"| {p.punctual} delayed jobs (run_at 0.5-8 s ahead), due -> start | p50 {c('delayed_p50')} ms, "
        f"p99 {c('delayed_p99')} ms | no cron: the due-time hint and the worker's timers |",
        f"| {p.punctual} retries (Retry(after=1-5 s)), due -> start | p50 {c('retry_p50')} ms, "
        f"p99 {c('retry_p99')} ms | no cron |",
    ]
    if all("—" in r for r in rows):
        return ""
    return "\n".join(["| The wake path (jobkit, `worker serve` defaults) | measured | note |",
                      "|---|---:|---|", *rows])


def bloat_table(results: Results) -> str:
    out = []
    for metric, label in (("bloat_prune_on", "prune on"), ("bloat_prune_off", "prune off")):
        for sample in results.get("jobkit", metric)[:1]:
            tables = sample.extra.get("tables", {})
            parts = [f"{name}: {t['table_mb']:.1f} MB table + {t['index_mb']:.1f} MB indexes, "
                     f"{t['live']:,} live / {t['dead']:,} dead tuples, {t['vacuums']} vacuums"
                     for name, t in tables.items()]
            status = "" if sample.ok else f" **FAILED** ({sample.check.detail})"
            total = f"{sample.value:.1f} MB" if sample.value is not None else "—"
            out.append(f"| {label} | {total}{status} | {'<br>'.join(parts)} |")
    if not out:
        return ""
    p = results.preset
    return "\n".join([f"| {p.bloat_jobs:,} jobs processed | jobs + job_attempts + wakeups | detail |",
                      "|---|---:|---|", *out])


def render(results: Results, meta: dict[str, Any], command: str, notes: str) -> str:
    p = results.preset
    when = dt.datetime.fromtimestamp(results.started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    settings = "\n".join(f"- **{s.name}**: {s.settings}" for s in results.systems)
    parts = [
        "# jobkit benchmarks",
        "",
        f"Generated by `{command}` on {when} ({p.name} preset, {p.repeats} repeat(s), medians; "
        f"{results.elapsed / 60:.1f} min). Every cell passed its exactly-once check unless it says FAILED.",
        "",
        "## Machine and versions",
        "",
        *(f"- {k}: {v}" for k, v in meta.items()),
        f"- load average (1/5/15 min): {'; '.join(results.load)}",
        "",
        "## Commands",
        "",
        COMMANDS,
        "## Results",
        "",
        main_table(results),
        "",
        wake_table(results),
        "",
        claim_table(results),
        "",
        keys_table(results),
        "",
        bloat_table(results),
        "",
        "## Targets",
        "",
        targets.render(results),
        "",
        "## How each system was run",
        "",
        settings,
        "",
        "## Method",
        "",
        METHOD,
        "## Notes",
        "",
        NOTES_START,
        notes.strip(),
        NOTES_END,
        "",
    ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts))


def write_section(path: Path, start: str, end: str, text: str) -> None:
    """Replace the hand-kept notes' section between ``start`` and ``end`` markers with ``text``
    (which carries the markers), or add it at the top of the notes (bench.dashboard, bench.index_cost)."""
    doc = path.read_text()
    if start in doc and end in doc:
        doc = doc[:doc.index(start)] + text + doc[doc.index(end) + len(end):]
    else:
        doc = doc.replace(NOTES_START, NOTES_START + "\n" + text + "\n", 1)
    path.write_text(doc)


def existing_notes(path: Path) -> str:
    if path.exists():
        text = path.read_text()
        if NOTES_START in text and NOTES_END in text:
            return text.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0]
    return DEFAULT_NOTES


def plot(results: Results, path: Path) -> bool:
    """Drain throughput vs concurrency, one line per system; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    p = results.preset
    labels = [str(c) for c in p.concurrency] + [f"{PROCS} procs x {PROC_CONCURRENCY}"]
    metrics = [f"drain_c{c}" for c in p.concurrency] + ["drain_procs"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for s in results.systems:
        ys = [results.value(s.key, m) for m in metrics]
        if any(y is not None for y in ys):
            ax.plot(labels, [y if y is not None else float("nan") for y in ys], marker="o", label=s.name)
    ax.set_xlabel("concurrency (handlers in flight per worker)")
    ax.set_ylabel("jobs/s (median)")
    ax.set_title(f"Drain {p.n_drain:,} no-op jobs, one PostgreSQL 15 ({p.name} preset, medians)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
