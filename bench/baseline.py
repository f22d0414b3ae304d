"""`python -m bench --baseline REF [--quick | --smoke] [--rounds N] [--repeats N] [--no-peers] [--out FILE]`

The regression guard (issue 23): REF (a commit, tag or released version) built into its own cached
virtualenv (bench/baseline_venv.py) against the working tree, on ONE PostgreSQL cluster (fsync on).
Each side is deployed with its own `jobkit deploy` into a template database; every measurement gets
a fresh copy of its side's template and runs bench/baseline_driver.py in that side's venv.

Order: ``rounds`` rounds; in each, every figure runs ``repeats`` old/new pairs back to back,
alternating which side goes first (old, new, then new, old, ...). A pair's two samples give one
new ÷ old ratio. Peers (PgQueuer at its best config and defaults, the raw pgbench claim-50 ceiling
at 4 clients) run once per round in the same cluster unless ``--no-peers``.

A tool, not a CI gate: it prints the tables (and writes --out when given), and exits 1 only when a
measurement failed its exactly-once check, never on a figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import baseline_peers
from .baseline_stats import Run, Sample, baseline_table, ratio_of_medians, show_ratio
from .baseline_venv import BaselineError, Side, build, working_tree
from .cluster import BenchCluster, machine

Echo = Callable[[str], None]
Outcome = tuple[float | None, bool, str]  # jobs/s (None: not measured), exactly-once ok, detail

FIGURES = (
    ("single", "single enqueue (one call, one transaction)"),
    ("bulk", "bulk enqueue (`enqueue_many`, 1,000 per call)"),
    ("drain_fixed", "drain, fixed window (concurrency 16, batch 100, prefetch 25)"),
    ("drain_defaults", "drain, `Drainer(concurrency=16)` defaults"),
)


@dataclass(frozen=True)
class Sizes:
    name: str
    repeats: int  # old/new pairs per figure per round
    single: int
    bulk: int
    drain: int


SIZES = {
    "full": Sizes("full", 3, 2_000, 20_000, 20_000),
    "quick": Sizes("quick", 2, 1_000, 20_000, 10_000),
    "smoke": Sizes("smoke", 1, 30, 300, 300),
}


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def jobs_for(sizes: Sizes, figure: str) -> int:
    return {"single": sizes.single, "bulk": sizes.bulk}.get(figure, sizes.drain)


def drive(side: Side, figure: str, url: str, n: int) -> Outcome:
    done = subprocess.run(side.driver(figure, url, n), capture_output=True, text=True, check=False,
                          timeout=1800)
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, False, f"driver exited {done.returncode}: {tail[0][:200]}"
    return out.get("value"), bool(out.get("ok")), str(out.get("detail", ""))


def installer(side: Side) -> Callable[[str], None]:
    def install(url: str) -> None:
        done = subprocess.run(side.deploy(url), capture_output=True, text=True, check=False,
                              cwd=Path(side.python).parent)  # no jobkit.toml from the checkout
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise BaselineError(f"`jobkit deploy` of {side.label} failed: {tail[0]}")
    return install


def measure(cluster: BenchCluster, side_key: str, side: Side, figure: str, n: int) -> Outcome:
    with cluster.database(side_key) as url:
        return drive(side, figure, url, n)


def run_pairs(cluster: BenchCluster, sides: dict[str, Side], sizes: Sizes, rounds: int, echo: Echo,
              peers: baseline_peers.Peers | None) -> Run:
    run = Run()
    for key, side in sides.items():
        cluster.register(f"side_{key}", installer(side))
    for r in range(1, rounds + 1):
        echo(f"round {r}/{rounds}")
        for figure, _label in FIGURES:
            for pair in range(sizes.repeats):
                first = (pair + r + 1) % 2 == 0  # round 1 pair 0: old first; then alternate
                for key in ("old", "new") if first else ("new", "old"):
                    value, ok, detail = measure(cluster, f"side_{key}", sides[key], figure,
                                                jobs_for(sizes, figure))
                    run.samples.append(Sample(key, figure, r, pair, value, ok, detail))
                    shown = "-" if value is None else f"{value:,.0f}"
                    echo(f"  {key:<3} {figure:<15} {shown:>10}  {'ok' if ok else 'FAILED'}: {detail}")
        if peers is not None:
            peers.round(cluster, r, sizes, echo)
    return run


def defaults_share(run: Run, side: str) -> float | None:
    return ratio_of_medians(run.values(side, "drain_defaults"), run.values(side, "drain_fixed"))


def render(run: Run, sides: dict[str, Side], sizes: Sizes, rounds: int, command: str, meta: dict[str, str],
           peers: baseline_peers.Peers | None, seconds: float) -> str:
    parts = [f"Command: `{command}` ({sizes.name} sizes: {sizes.single:,} single, {sizes.bulk:,} bulk, "
             f"{sizes.drain:,} per drain; {rounds} rounds x {sizes.repeats} pair(s) per figure; "
             f"{seconds / 60:.1f} min).",
             f"old = {sides['old'].label}; new = {sides['new'].label}. Machine: {meta['cpu']}, "
             f"PostgreSQL {meta['PostgreSQL']} (fsync on); load average (1/5/15 min) "
             f"{meta.get('load', '?')}.",
             "", baseline_table(run, FIGURES, sides["old"].label, sides["new"].label), "",
             "Drain at the defaults ÷ the fixed window, ratio of medians: "
             + "; ".join(f"{sides[k].label} {show_ratio(defaults_share(run, k), percent=True)}"
                         for k in ("old", "new")) + "."]
    if peers is not None:
        parts += ["", peers.table(run)]
    failed = run.failures() + (peers.failures() if peers else [])
    if failed:
        parts += ["", "Failed samples (left out of the figures):"]
        parts += [f"- {s.side} {s.figure} round {s.round}: {s.detail}" for s in failed]
    return "\n".join(parts) + "\n"


def main(ref: str, quick: bool, smoke: bool, rounds: int, repeats: int | None, with_peers: bool,
         out: Path | None, command: str, echo: Echo = print) -> int:
    if rounds < 2:
        print("error: --rounds must be at least 2 (A, B, A, B); pass --rounds 2 or more", file=sys.stderr)
        return 2
    sizes = SIZES["smoke" if smoke else "quick" if quick else "full"]
    if repeats:
        sizes = Sizes(sizes.name, repeats, sizes.single, sizes.bulk, sizes.drain)
    started = time.time()
    try:
        sides = {"old": build(ref, echo), "new": working_tree()}
    except BaselineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    peers = baseline_peers.Peers() if with_peers else None
    with BenchCluster(echo=echo) as cluster:
        meta = {"PostgreSQL": cluster.server_version(), **machine()}
        load = f"start {_loadavg()}"
        try:
            run = run_pairs(cluster, sides, sizes, rounds, echo, peers)
        except BaselineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    meta["load"] = f"{load}, end {_loadavg()}"
    text = render(run, sides, sizes, rounds, command, meta, peers, time.time() - started)
    echo("")
    echo(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        echo(f"wrote {out}")
    return 1 if run.failures() or (peers and peers.failures()) else 0
