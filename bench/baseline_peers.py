"""The peers of `python -m bench --baseline`, measured in the same run and cluster, once per round:
PgQueuer (bench/pgq.py, durability `balanced`) at its best config (the better of 4 QueueManagers
and 2 processes x 16, batch 100) and at its defaults (16 QueueManagers, run()'s defaults), and the
raw ceiling (bench/raw.py: pgbench claiming 50 and completing them in one transaction, 4 clients)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .baseline_stats import Run, Sample, cell, ratio_of_medians, show_ratio, spread

if TYPE_CHECKING:
    from .baseline import Sizes
    from .cluster import BenchCluster

Echo = Callable[[str], None]
RAW_CLIENTS = 4


@dataclass
class Peers:
    samples: list[Sample] = field(default_factory=list)

    def round(self, cluster: BenchCluster, r: int, sizes: Sizes, echo: Echo) -> None:
        from . import pgq, raw
        from .cluster import install_jobkit

        cluster.register("pgqueuer", pgq.install)
        cluster.register("raw", install_jobkit)  # raw_jobs is created LIKE jobkit.jobs
        n = sizes.drain
        plan: list[tuple[str, str, str, Callable[..., Any], tuple[int, ...]]] = [
            ("pgqueuer", "single", "PgQueuer single enqueue", pgq.enqueue_single, (sizes.single,)),
            ("pgqueuer", "bulk", "PgQueuer bulk enqueue", pgq.enqueue_bulk, (sizes.bulk,)),
            ("pgqueuer", "drain_c4", "PgQueuer drain c=4, batch 100", pgq.drain, (n, 4)),
            ("pgqueuer", "drain_procs", "PgQueuer drain 2 x 16, batch 100", pgq.drain_procs, (n,)),
            ("pgqueuer", "drain_defaults", "PgQueuer drain defaults", pgq.drain_defaults, (n,)),
            ("raw", "ceiling", f"raw claim-50 ceiling, {RAW_CLIENTS} clients", raw.drain_clients,
             (n, RAW_CLIENTS, 2)),
        ]
        for system, figure, label, fn, args in plan:
            try:
                with cluster.database(system) as url:
                    got = fn(url, *args)
                value, ok, detail = got.value, got.ok, got.check.detail
            except Exception as exc:  # noqa: BLE001 - one broken peer must not stop the run
                echo(traceback.format_exc(limit=3))
                value, ok, detail = None, False, f"error: {type(exc).__name__}: {exc}"
            self.samples.append(Sample(system, figure, r, 0, value, ok, detail))
            shown = "-" if value is None else f"{value:,.0f}"
            echo(f"  {label:<48} {shown:>10}  {'ok' if ok else 'FAILED'}: {detail}")

    def values(self, system: str, figure: str) -> list[float]:
        return Run(self.samples).values(system, figure)

    def best(self) -> tuple[list[float], str]:
        """PgQueuer's best drain config in this run: the one with the higher median."""
        c4, procs = self.values("pgqueuer", "drain_c4"), self.values("pgqueuer", "drain_procs")
        m4, mp = spread(c4), spread(procs)
        if mp is not None and (m4 is None or mp.median > m4.median):
            return procs, "2 processes x 16, batch 100"
        return c4, "4 QueueManagers, batch 100"

    def failures(self) -> list[Sample]:
        return [s for s in self.samples if not s.ok]

    def table(self, run: Run) -> str:
        best, best_config = self.best()
        pq_defaults, ceiling = self.values("pgqueuer", "drain_defaults"), self.values("raw", "ceiling")

        def new(figure: str) -> list[float]:
            return run.values("new", figure)

        def old(figure: str) -> list[float]:
            return run.values("old", figure)

        rows = [
            ("single enqueue", new("single"), old("single"), self.values("pgqueuer", "single"), "PgQueuer"),
            ("bulk enqueue", new("bulk"), old("bulk"), self.values("pgqueuer", "bulk"), "PgQueuer"),
            ("drain, fixed window", new("drain_fixed"), old("drain_fixed"), best,
             f"PgQueuer best ({best_config})"),
            ("drain, defaults", new("drain_defaults"), old("drain_defaults"), best,
             f"PgQueuer best ({best_config})"),
            ("drain, defaults", new("drain_defaults"), old("drain_defaults"), pq_defaults,
             "PgQueuer defaults (16 QueueManagers)"),
            ("drain, fixed window", new("drain_fixed"), old("drain_fixed"), ceiling,
             f"raw claim-50 ceiling, {RAW_CLIENTS} clients"),
            ("drain, defaults", new("drain_defaults"), old("drain_defaults"), ceiling,
             f"raw claim-50 ceiling, {RAW_CLIENTS} clients"),
        ]
        lines = ["| jobkit figure (jobs/s) | new | old | against | its median (min–max) "
                 "| new ÷ it | old ÷ it |", "|---|---:|---:|---|---:|---:|---:|"]
        for label, n, o, peer, against in rows:
            pct = against.startswith("raw")
            lines.append(f"| {label} | {cell(spread(n))} | {cell(spread(o))} | {against} "
                         f"| {cell(spread(peer))} | **{show_ratio(ratio_of_medians(n, peer), pct)}** "
                         f"| {show_ratio(ratio_of_medians(o, peer), pct)} |")
        return "\n".join(lines)
