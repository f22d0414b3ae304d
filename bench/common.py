"""Shared pieces: a measurement's outcome, the drain settings, percentiles, small SQL helpers."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .verify import Check

JOB_TYPE = "bench.noop"
#: jobkit's bulk enqueue (and peers' bulk insert) batch.
BULK_BATCH = 1000


@dataclass
class Sample:
    """One measurement: its value (None when it could not be taken) and its exactly-once check."""

    value: float | None
    check: Check
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.value is not None and self.check.ok


@dataclass(frozen=True)
class DrainConfig:
    """jobkit Drainer settings for one concurrency: claims of ``batch_size``; the claim window
    (claimed, unfinished jobs) is ``concurrency * prefetch``, sized to about four claims so the next
    claims are in flight while earlier batches run and complete (measured: +6-15% over two)."""

    concurrency: int
    batch_size: int = 100
    prefetch: int = 0  # 0 = derived: ceil(4 * batch_size / concurrency)

    @property
    def effective_prefetch(self) -> int:
        return self.prefetch or max(1, math.ceil(4 * self.batch_size / self.concurrency))

    def describe(self) -> str:
        return (f"concurrency={self.concurrency}, batch_size={self.batch_size}, "
                f"prefetch={self.effective_prefetch} (window {self.concurrency * self.effective_prefetch})")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: list[float]) -> float:
    return statistics.median(values)


def execute(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)  # type: ignore[arg-type]


def scalar(url: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None
