"""The systems under test, each as a set of optional measurement functions (None = not measured)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from . import jk, jk_extra
from .common import DrainConfig, Sample

PROCS = 2  # OS processes in the multi-process drain
PROC_CONCURRENCY = 16  # concurrency of each of them


@dataclass(frozen=True)
class System:
    key: str  # template database / CLI name
    name: str  # table heading
    settings: str  # how it was configured, for the report
    install: Callable[[str], None] | None = None  # None: jobkit, which the cluster installs itself
    enqueue_single: Callable[[str, int], Sample] | None = None
    enqueue_bulk: Callable[[str, int], Sample] | None = None
    drain: Callable[[str, int, int], Sample] | None = None  # (url, jobs, concurrency)
    drain_procs: Callable[[str, int], Sample] | None = None
    drain_defaults: Callable[[str, int], Sample] | None = None  # c=16 with the system's own defaults
    latency: Callable[[str, float, float], Sample] | None = None  # (url, jobs/s, seconds)


JOBKIT = System(
    key="jobkit", name="jobkit",
    settings=("Drainer + PostgresBackend (psycopg pool, max_size 4), async no-op handler; claims of "
              f"{DrainConfig(1).batch_size} (jobkit.claim_jobs), window = concurrency x prefetch with "
              "prefetch = ceil(4 x batch / concurrency), completions group-committed (jobkit.complete_jobs); "
              f"c=1: {DrainConfig(1).describe()}; c=16: {DrainConfig(16).describe()}. "
              "Latency: Listener on the insert trigger's NOTIFY (transport notify)."),
    enqueue_single=jk.enqueue_single, enqueue_bulk=jk.enqueue_bulk,
    drain=lambda url, n, c: jk.drain(url, n, DrainConfig(c)),
    drain_procs=lambda url, n: jk.drain_procs(url, n, DrainConfig(PROC_CONCURRENCY), PROCS),
    drain_defaults=lambda url, n: jk.drain_defaults(url, n),
    latency=jk_extra.latency_run,
)

#: Peers live in their own modules (they need the `bench` extra); key -> "module:attribute".
PEERS = {
    "pgqueuer": "bench.pgq:SYSTEM",
    "pgqueuer-durable": "bench.pgq:SYSTEM_DURABLE",
    "procrastinate": "bench.proc:SYSTEM",
    "raw": "bench.raw:SYSTEM",
}
ALL = ["jobkit", *PEERS]


def load(keys: list[str], echo: Callable[[str], None]) -> list[System]:
    """The requested systems; a peer whose package is missing is skipped with a note."""
    found = []
    for key in keys:
        if key == "jobkit":
            found.append(JOBKIT)
            continue
        module, attr = PEERS[key].split(":")
        try:
            found.append(getattr(importlib.import_module(module), attr))
        except ImportError as exc:
            echo(f"skipping {key}: {exc} (pip install -e '.[bench]')")
    return found
