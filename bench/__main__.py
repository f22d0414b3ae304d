"""`python -m bench [--quick | --smoke] [--only jobkit,pgqueuer,...] [--groups drain,...]`

Starts its own PostgreSQL (fsync on) in a temp dir, runs the measurements, prints the markdown
report and writes docs/BENCHMARKS.md plus docs/drain_throughput.png (not with --smoke).

`python -m bench --baseline REF [--quick | --smoke] [--rounds N] [--repeats N] [--no-peers] [--out FILE]`
runs REF (a commit, tag or released version, built into its own cached virtualenv) interleaved
with the working tree on one cluster and prints new / old per figure (bench/baseline.py); it writes
only --out, never docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import sys
from pathlib import Path

from . import report, systems, targets
from .cluster import BenchCluster, code_fingerprint, machine
from .runner import GROUPS, PRESETS, run

ROOT = Path(__file__).resolve().parents[1]


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="1 repeat, smaller N (about 3 minutes); with --baseline: 2 pairs per round")
    mode.add_argument("--smoke", action="store_true",
                      help="tiny N, jobkit only; writes no docs (< 20 s); with --baseline: tiny N, peers too")
    ap.add_argument("--only", default=None, help=f"comma-separated systems ({','.join(systems.ALL)})")
    ap.add_argument("--groups", default=None, help=f"comma-separated groups ({','.join(GROUPS)})")
    ap.add_argument("--repeats", type=int, default=None, help="override the preset's repeats")
    ap.add_argument("--jobs", type=int, default=None, help="override N, the jobs per drain")
    ap.add_argument("--out", type=Path, default=None,
                    help="default docs/BENCHMARKS.md; with --baseline: none (print only)")
    ap.add_argument("--baseline", metavar="REF", default=None,
                    help="compare the working tree with REF (a commit, tag or released version)")
    ap.add_argument("--rounds", type=int, default=2, help="with --baseline: interleaved rounds (at least 2)")
    ap.add_argument("--no-peers", action="store_true",
                    help="with --baseline: skip PgQueuer and the raw pgbench ceiling")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "drain_throughput.png")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--snapshot", action="store_true",
                    help="benchmark a frozen copy of jobkit at git HEAD (immune to edits mid-run)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("jobkit").setLevel(logging.ERROR)  # the retries the punctuality run provokes
    raw_args = sys.argv[1:] if argv is None else argv
    args = parse(raw_args)
    if args.baseline:
        from . import baseline

        command = "python -m bench " + " ".join(shlex.quote(a) for a in raw_args)
        return baseline.main(args.baseline, args.quick, args.smoke, args.rounds, args.repeats,
                             not args.no_peers, args.out, command)
    if args.out is None:
        args.out = ROOT / "docs" / "BENCHMARKS.md"
    if args.snapshot:
        from .snapshot import run_frozen

        return run_frozen([a for a in raw_args if a != "--snapshot"])
    preset = PRESETS["smoke" if args.smoke else "quick" if args.quick else "full"]
    if args.repeats:
        preset = dataclasses.replace(preset, repeats=args.repeats)
    if args.jobs:
        preset = dataclasses.replace(preset, n_drain=args.jobs)
    keys = args.only.split(",") if args.only else (["jobkit"] if args.smoke else systems.ALL)
    unknown = set(keys) - set(systems.ALL)
    if unknown:
        print(f"unknown system(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    groups = tuple(args.groups.split(",")) if args.groups else GROUPS
    chosen = systems.load(keys, print)
    before = code_fingerprint()
    with BenchCluster() as cluster:
        meta = {"PostgreSQL": f"{cluster.server_version()} (jobkit LocalCluster; {cluster.settings_line()})",
                **machine()}
        print(f"PostgreSQL {meta['PostgreSQL']}")
        results = run(cluster, preset, chosen, groups)
    if code_fingerprint() != before:
        warning = ("WARNING: jobkit's code (toolkit/ or sql/) changed during this run; the figures may mix "
                   "versions. Run it again.")
        print(warning, file=sys.stderr)
        meta["code"] = f"**{warning}**"
    else:
        meta["code"] = f"toolkit/ + sql/ fingerprint {before}, unchanged during the run"
    shown = [*raw_args, *(["--snapshot"] if os.environ.get("JOBKIT_BENCH_SNAPSHOT") else [])]
    command = "python -m bench " + " ".join(shlex.quote(a) for a in shown)
    text = report.render(results, meta, command.strip(), report.existing_notes(args.out))
    print()
    print(report.main_table(results))
    for extra in (report.claim_table(results), report.keys_table(results), report.bloat_table(results)):
        if extra:
            print()
            print(extra)
    print()
    print(targets.render(results))
    if not (args.smoke or args.no_write):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"\nwrote {args.out}")
        if report.plot(results, args.plot):
            print(f"wrote {args.plot}")
    print("exactly-once: " + ("every run passed" if results.all_ok else "FAILED in at least one run"))
    return 0 if results.all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
