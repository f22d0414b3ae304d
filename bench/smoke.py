"""The smoke run: every jobkit measurement path on a tiny N (no peers), for CI and the test suite.
`python -m bench.smoke` (or `python -m bench --smoke`); never judges timings, only exactly-once."""

from __future__ import annotations

import sys
from collections.abc import Callable

from jobkit.ops.localdb import LocalCluster

from . import systems
from .cluster import BenchCluster
from .runner import GROUPS, PRESETS, Results, run


def run_smoke(local: LocalCluster | None = None, echo: Callable[[str], None] = print) -> Results:
    """Run the smoke preset for jobkit on its own cluster, or on ``local`` (left running)."""
    cluster = BenchCluster.attach(local) if local is not None else BenchCluster()
    with cluster:
        return run(cluster, PRESETS["smoke"], systems.load(["jobkit"], echo), GROUPS, echo)


def main() -> int:
    results = run_smoke()
    print("exactly-once: " + ("every run passed" if results.all_ok else "FAILED"))
    return 0 if results.all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
