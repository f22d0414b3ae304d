"""Runs the measurements: systems interleaved (their order rotates every repeat), a fresh database
for each measurement, the exactly-once check after each one, medians over the repeats."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from . import jk, jk_extra, wake
from . import keys as bench_keys
from .cluster import BenchCluster
from .common import Sample, median
from .systems import PROC_CONCURRENCY, PROCS, System
from .verify import Check

Echo = Callable[[str], None]
GROUPS = ("enqueue", "drain", "latency", "wake", "claim", "keys", "bloat")
BLOAT_NAPTIME = "5s"


@dataclass(frozen=True)
class Preset:
    name: str
    repeats: int
    n_single: int  # single-row enqueues
    n_bulk: int  # jobs enqueued in batches of 1,000
    n_drain: int  # jobs per drain measurement
    concurrency: tuple[int, ...]
    latency_rate: float  # jobs/s
    latency_seconds: float
    claim_small: int  # pending jobs, small backlog
    claim_large: int  # pending jobs, large backlog
    claim_future: int  # jobs scheduled a day ahead (with claim_small due)
    claims: int  # timed claims per claim-cost measurement
    bloat_jobs: int
    bloat_wave: int
    backlogs: tuple[int, ...] = (5_000, 50_000)  # jobs drained through the wake path
    burst: int = 1_000  # single-row enqueues in one second through pg_net
    punctual: int = 200  # delayed jobs, and retries, for punctuality


PRESETS = {
    "full": Preset("full", 3, 2_000, 20_000, 20_000, (1, 4, 16), 50, 20, 10_000, 1_000_000, 200_000,
                   100, 500_000, 10_000),
    "quick": Preset("quick", 1, 500, 5_000, 5_000, (1, 4, 16), 50, 5, 10_000, 300_000, 200_000,
                    50, 60_000, 10_000),
    "smoke": Preset("smoke", 1, 50, 200, 200, (1, 4), 50, 1, 1_000, 3_000, 2_000, 10, 600, 200,
                    backlogs=(300,), burst=50, punctual=10),
}


@dataclass
class Results:
    preset: Preset
    systems: list[System]
    samples: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    elapsed: float = 0.0
    load: list[str] = field(default_factory=list)

    def add(self, system: str, metric: str, sample: Sample) -> None:
        self.samples.setdefault((system, metric), []).append(sample)

    def get(self, system: str, metric: str) -> list[Sample]:
        return self.samples.get((system, metric), [])

    def value(self, system: str, metric: str) -> float | None:
        """The median over repeats; None when not measured or when any repeat FAILED."""
        samples = self.get(system, metric)
        if not samples or not all(s.ok for s in samples):
            return None
        return median([s.value for s in samples if s.value is not None])

    def failed(self, system: str, metric: str) -> bool:
        return any(not s.ok for s in self.get(system, metric))

    @property
    def all_ok(self) -> bool:
        return all(s.ok for samples in self.samples.values() for s in samples)


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


Call = Callable[[Callable[..., Sample], str], Sample]


def _plan(p: Preset, groups: tuple[str, ...]) -> list[tuple[str, str, Call]]:
    """(System attribute[:metric], label, how to call it), in run order, for the per-system groups."""
    plan: list[tuple[str, str, Call]] = []
    if "enqueue" in groups:
        plan += [("enqueue_single", "enqueue single (jobs/s)", lambda fn, u: fn(u, p.n_single)),
                 ("enqueue_bulk", "enqueue bulk (jobs/s)", lambda fn, u: fn(u, p.n_bulk))]
    if "drain" in groups:
        plan += [(f"drain:drain_c{c}", f"drain c={c} (jobs/s)", lambda fn, u, c=c: fn(u, p.n_drain, c))
                 for c in p.concurrency]
        plan.append(("drain_procs", f"drain {PROCS}x c={PROC_CONCURRENCY} (jobs/s)",
                     lambda fn, u: fn(u, p.n_drain)))
        plan.append(("drain_defaults", "drain c=16, defaults (jobs/s)", lambda fn, u: fn(u, p.n_drain)))
    if "latency" in groups:
        plan.append(("latency:latency_p50", f"latency p50 @{p.latency_rate:g}/s (ms)",
                     lambda fn, u: fn(u, p.latency_rate, p.latency_seconds)))
    return plan


def _wake(measure: Callable[..., Sample], results: Results, jobkit: System, p: Preset) -> None:
    """The wake path (bench/wake.py), jobkit only; p99s are recorded beside their p50s."""
    for n in p.backlogs:
        measure(jobkit, f"direct_{n}", lambda u, n=n: wake.direct(u, n), f"direct Drainer, {n:,} (jobs/s)")
        for transport in ("pg_net", "notify"):
            measure(jobkit, f"wake_{transport}_{n}", lambda u, n=n, t=transport: wake.backlog(u, n, t),
                    f"{n:,} through {transport} (jobs/s)")
    for key, linger in (("burst", None), ("burst_nolinger", 0.0)):
        sample = measure(jobkit, f"{key}_p50", lambda u, lg=linger: wake.burst(u, p.burst, lg),
                         f"burst of {p.burst:,}{'' if linger is None else ', no linger'} p50 (ms)")
        results.add("jobkit", f"{key}_p99", Sample(sample.extra.get("p99_ms"), sample.check))
    for kind in ("delayed", "retry"):
        sample = measure(jobkit, f"{kind}_p50", lambda u, k=kind: wake.punctuality(u, p.punctual, k),
                         f"{kind} due -> start p50 (ms)")
        results.add("jobkit", f"{kind}_p99", Sample(sample.extra.get("p99_ms"), sample.check))


def _keys(measure: Callable[..., Sample], jobkit: System, p: Preset) -> None:
    """Concurrency keys on (50 and 5,000 keys, fair claims) against off: claim cost, drain c=16."""
    for suffix, keys in bench_keys.SHAPES:
        shown = f"{keys:,} keys" if keys else "keys off"
        measure(jobkit, f"keys_claim_{suffix}",
                lambda u, k=keys: bench_keys.claim_cost(u, p.claim_small, k, p.claims),
                f"claim 50, {shown} (ms)")
    for suffix, keys in bench_keys.SHAPES:
        shown = f"{keys:,} keys" if keys else "keys off"
        measure(jobkit, f"keys_drain_{suffix}", lambda u, k=keys: bench_keys.drain(u, p.n_drain, k),
                f"drain c=16, {shown} (jobs/s)")
    suffix, keys, per_key = bench_keys.CAPPED
    measure(jobkit, f"keys_drain_{suffix}", lambda u: bench_keys.drain(u, p.n_drain, keys, per_key),
            f"drain c=16, {keys} keys, at most {per_key} running per key (jobs/s)")


def run(cluster: BenchCluster, preset: Preset, systems: list[System], groups: tuple[str, ...],
        echo: Echo = print) -> Results:
    for s in systems:
        if s.install is not None:
            cluster.register(s.key, s.install)
    results = Results(preset, systems)
    results.load.append(f"start {_loadavg()}")

    def measure(system: System, metric: str, fn: Callable[[str], Sample], label: str) -> Sample:
        try:
            with cluster.database(system.key) as url:
                sample = fn(url)
        except Exception as exc:  # noqa: BLE001 - one broken measurement must not stop the run
            echo(traceback.format_exc(limit=3))
            sample = Sample(None, Check(False, f"error: {type(exc).__name__}: {exc}"))
        results.add(system.key, metric, sample)
        shown = f"{sample.value:,.1f}" if sample.value is not None else "-"
        echo(f"  {system.name:<14} {label:<28} {shown:>12}   "
             f"{'ok' if sample.ok else 'FAILED'}: {sample.check.detail}")
        return sample

    p = preset
    jobkit = next((s for s in systems if s.key == "jobkit"), None)
    for r in range(p.repeats):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        echo(f"repeat {r + 1}/{p.repeats} (order: {', '.join(s.name for s in order)}; load {_loadavg()})")
        for metric, label, call in _plan(p, groups):
            for s in order:
                fn = getattr(s, metric.split(":")[0])
                if fn is None:
                    continue
                key = metric.split(":")[1] if ":" in metric else metric
                sample = measure(s, key, lambda u, fn=fn, call=call: call(fn, u), label)
                if key == "latency_p50":
                    results.add(s.key, "latency_p99", Sample(sample.extra.get("p99_ms"), sample.check))
        if "enqueue" in groups and jobkit:  # the asyncio producer API, next to the sync figures
            measure(jobkit, "enqueue_single_async", lambda u: jk.enqueue_single_async(u, p.n_single),
                    "enqueue single async (jobs/s)")
            measure(jobkit, "enqueue_bulk_async", lambda u: jk.enqueue_bulk_async(u, p.n_bulk),
                    "enqueue bulk async (jobs/s)")
        if "wake" in groups and jobkit:
            _wake(measure, results, jobkit, p)
        if "claim" in groups and jobkit:
            for metric, due, future in (("claim_small", p.claim_small, 0), ("claim_large", p.claim_large, 0),
                                        ("claim_future", p.claim_small, p.claim_future)):
                measure(jobkit, metric, lambda u, d=due, f=future: jk_extra.claim_cost(u, d, f, p.claims),
                        f"claim 50: {due:,} due + {future:,} future (ms)")
        if "keys" in groups and jobkit:
            _keys(measure, jobkit, p)
        if "bloat" in groups and r == 0 and jobkit:
            # Time compression: minutes stand for hours of traffic, so autovacuum wakes every
            # BLOAT_NAPTIME instead of every minute while these run (prune runs after every wave).
            cluster.reload_setting("autovacuum_naptime", BLOAT_NAPTIME)
            try:
                for metric, prune in (("bloat_prune_on", True), ("bloat_prune_off", False)):
                    measure(jobkit, metric,
                            lambda u, pr=prune: jk_extra.bloat(u, p.bloat_jobs, p.bloat_wave, pr),
                            f"{p.bloat_jobs:,} jobs, prune {'on' if prune else 'off'} (MB)")
            finally:
                cluster.reload_setting("autovacuum_naptime", None)
    results.elapsed = time.time() - results.started
    results.load.append(f"end {_loadavg()}")
    return results
