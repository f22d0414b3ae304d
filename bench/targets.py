"""jobkit's performance targets, judged against the measured medians."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runner import Results

DRAINS = ("drain_c1", "drain_c4", "drain_c16", "drain_procs")
LISTEN_NOTIFY_PEERS = ("pgqueuer", "pgqueuer-durable", "procrastinate")
PGQUEUER = ("pgqueuer", "pgqueuer-durable")
LABELS = {"drain_c1": "c=1", "drain_c4": "c=4", "drain_c16": "c=16", "drain_procs": "2 processes x 16"}


def best_drain(results: Results, *systems: str) -> tuple[float | None, str]:
    """The best drain median over ``systems`` and their configurations, and which it was."""
    found = [(v, f"{s} {LABELS[m]}") for s in systems for m in DRAINS
             if (v := results.value(s, m)) is not None]
    return max(found) if found else (None, "")


def best(results: Results, metric: str, systems: tuple[str, ...]) -> float | None:
    found = [v for s in systems if (v := results.value(s, metric)) is not None]
    return max(found) if found else None


def evaluate(results: Results) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) rows; verdict is met / MISSED / not measured."""
    v = results.value
    out: list[tuple[str, str, str]] = []

    def row(target: str, measured: str, ok: bool | None) -> None:
        out.append((target, measured, "not measured" if ok is None else ("met" if ok else "**MISSED**")))

    jk, jk_m = best_drain(results, "jobkit")
    pq, pq_m = best_drain(results, *PGQUEUER)
    raw, raw_m = best_drain(results, "raw")
    row("Drain >= 2x PgQueuer's best config",
        f"jobkit best {jk or 0:,.0f}/s ({jk_m}) vs PgQueuer best {pq or 0:,.0f}/s ({pq_m}): "
        f"{jk / pq:.2f}x" if jk and pq else "—", jk >= 2 * pq if jk and pq else None)
    row("Drain >= 40% of the raw claim-50 ceiling (pgbench)",
        f"{jk or 0:,.0f}/s vs ceiling {raw or 0:,.0f}/s ({raw_m}): {jk / raw:.0%}" if jk and raw else "—",
        jk >= 0.4 * raw if jk and raw else None)
    jb, pb = v("jobkit", "enqueue_bulk"), best(results, "enqueue_bulk", PGQUEUER)
    row("Bulk enqueue >= 2x PgQueuer's bulk",
        f"{jb:,.0f}/s vs {pb:,.0f}/s: {jb / pb:.2f}x" if jb and pb else "—",
        jb >= 2 * pb if jb and pb else None)
    for q in ("p50", "p99"):
        mine = v("jobkit", f"latency_{q}")
        peers = {p: x for p in LISTEN_NOTIFY_PEERS if (x := v(p, f"latency_{q}")) is not None}
        lowest = min(peers.values()) if peers else None
        shown = ", ".join(f"{p} {x:.1f} ms" for p, x in peers.items())
        row(f"Latency {q} no worse than the LISTEN/NOTIFY peers",
            f"jobkit {mine:.1f} ms vs {shown}" if mine is not None and peers else "—",
            mine <= lowest if mine is not None and lowest is not None else None)
    small, large, fut = v("jobkit", "claim_small"), v("jobkit", "claim_large"), v("jobkit", "claim_future")
    p = results.preset
    row(f"Claim cost at {p.claim_large:,} / {p.claim_small:,} pending <= 1.3x",
        f"{large:.2f} / {small:.2f} ms = {large / small:.2f}x" if small and large else "—",
        large / small <= 1.3 if small and large else None)
    row(f"{p.claim_future:,} future-scheduled jobs do not slow claims (<= 1.3x)",
        f"{fut:.2f} / {small:.2f} ms = {fut / small:.2f}x" if small and fut else "—",
        fut / small <= 1.3 if small and fut else None)
    row(*_bounded(results))
    for keys in ("50", "5000"):
        on, off = v("jobkit", f"keys_drain_{keys}"), v("jobkit", "keys_drain_off")
        row(f"Drain with {int(keys):,} concurrency keys >= 70% of keys off",
            f"{on:,.0f}/s vs {off:,.0f}/s: {on / off:.0%}" if on and off else "—",
            on >= 0.7 * off if on and off else None)
    for n in p.backlogs:
        for transport in ("pg_net", "notify"):
            ratio = paired_ratio(results, f"wake_{transport}_{n}", f"direct_{n}")
            mine, direct = v("jobkit", f"wake_{transport}_{n}"), v("jobkit", f"direct_{n}")
            row(f"{n:,} jobs through the wake path ({transport}) >= 80% of the direct Drainer",
                f"{mine:,.0f} vs {direct:,.0f} jobs/s; median of the paired repeats {ratio:.0%}"
                if mine and direct and ratio else "—", ratio >= 0.8 if ratio else None)
    for kind in ("retry", "delayed"):
        p99 = v("jobkit", f"{kind}_p99")
        row(f"{kind.capitalize()} punctuality: due -> start p99 <= 1 s without a seconds cron",
            f"p50 {v('jobkit', f'{kind}_p50') or 0:.0f} ms, p99 {p99:.0f} ms" if p99 is not None else "—",
            p99 <= 1000 if p99 is not None else None)
    defaults, tuned = v("jobkit", "drain_defaults"), v("jobkit", "drain_c16")
    row("`worker serve`'s defaults >= 80% of the tuned settings (concurrency 16)",
        f"{defaults:,.0f} vs {tuned:,.0f} jobs/s (batch 100, window 400): {defaults / tuned:.0%}"
        if defaults and tuned else "—", defaults >= 0.8 * tuned if defaults and tuned else None)
    return out


def _bounded(results: Results) -> tuple[str, str, bool | None]:
    """Pruned: the size stops growing (final <= 1.25x the size half-way) and stays under unpruned."""
    on, off = results.get("jobkit", "bloat_prune_on")[:1], results.get("jobkit", "bloat_prune_off")[:1]
    target = "Bounded table size with pruning"
    if not on or not on[0].ok or not on[0].extra.get("growth"):
        return target, "—", None
    growth = on[0].extra["growth"]
    half, final = growth[len(growth) // 2 - 1 if len(growth) > 1 else 0][1], growth[-1][1]
    off_mb = off[0].value if off and off[0].ok else None
    shown = (f"prune on: {half:.1f} MB half-way, {final:.1f} MB at the end"
             + (f"; prune off: {off_mb:.1f} MB" if off_mb else ""))
    return target, shown, final <= 1.25 * half and (off_mb is None or final < off_mb)


def paired_ratio(results: Results, metric: str, baseline: str) -> float | None:
    """The median over repeats of metric / baseline, each pair measured back to back (the machine's
    drift between repeats cancels out)."""
    import statistics

    mine, base = results.get("jobkit", metric), results.get("jobkit", baseline)
    pairs = [(a.value, b.value) for a, b in zip(mine, base, strict=False)
             if a.ok and b.ok and a.value and b.value]
    return statistics.median(x / y for x, y in pairs) if pairs else None


def render(results: Results) -> str:
    lines = ["| Target | Measured (medians) | Verdict |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {ok} |" for t, m, ok in evaluate(results)]
    return "\n".join(lines)
