"""The report math of `python -m bench --baseline`: medians with spreads, paired new ÷ old ratios,
and the markdown tables. Pure functions, no database (tests/unit/test_baseline_stats.py)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spread:
    """The median of some values and their range."""

    median: float
    low: float
    high: float
    count: int

    def show(self, digits: int = 0) -> str:
        if self.count == 1:
            return _num(self.median, digits)
        return f"{_num(self.median, digits)} ({_num(self.low, digits)}–{_num(self.high, digits)})"


def _num(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def spread(values: Sequence[float]) -> Spread | None:
    """None for no values (nothing measured, or every sample failed)."""
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


@dataclass
class Sample:
    """One driver run: which side, figure, round and pair (the n-th old/new pair of a figure)."""

    side: str  # "old" or "new"
    figure: str
    round: int
    pair: int
    value: float | None
    ok: bool
    detail: str = ""


@dataclass
class Run:
    samples: list[Sample] = field(default_factory=list)

    def values(self, side: str, figure: str, round_: int | None = None) -> list[float]:
        return [s.value for s in self.samples
                if s.side == side and s.figure == figure and s.ok and s.value is not None
                and (round_ is None or s.round == round_)]

    def ratios(self, figure: str) -> list[float]:
        """new ÷ old for every pair whose two samples both passed (the pair ran back to back)."""
        old = {(s.round, s.pair): s.value for s in self.samples
               if s.side == "old" and s.figure == figure and s.ok and s.value}
        return [s.value / old[(s.round, s.pair)] for s in self.samples
                if s.side == "new" and s.figure == figure and s.ok and s.value is not None
                and (s.round, s.pair) in old]

    def rounds(self) -> list[int]:
        return sorted({s.round for s in self.samples})

    def failures(self) -> list[Sample]:
        return [s for s in self.samples if not s.ok]


def cell(value: Spread | None, digits: int = 0) -> str:
    return "FAILED / not measured" if value is None else value.show(digits)


def per_round(run: Run, side: str, figure: str) -> str:
    medians = [spread(run.values(side, figure, r)) for r in run.rounds()]
    return " / ".join("—" if m is None else _num(m.median, 0) for m in medians)


def baseline_table(run: Run, figures: Sequence[tuple[str, str]], old: str, new: str) -> str:
    """One row per figure: each side's median (min–max) over every sample, each round's median, and
    the median (min–max) of the paired new ÷ old ratios."""
    lines = [f"| figure (jobs/s) | {old}: median (min–max) | {new}: median (min–max) "
             f"| {old} per round | {new} per round | new ÷ old: median (min–max) |",
             "|---|---:|---:|---:|---:|---:|"]
    for key, label in figures:
        old_cell, new_cell = cell(spread(run.values("old", key))), cell(spread(run.values("new", key)))
        lines.append(f"| {label} | {old_cell} | {new_cell} "
                     f"| {per_round(run, 'old', key)} | {per_round(run, 'new', key)} "
                     f"| **{cell(spread(run.ratios(key)), 2)}** |")
    return "\n".join(lines)


def ratio_of_medians(top: Sequence[float], bottom: Sequence[float]) -> float | None:
    a, b = spread(top), spread(bottom)
    return None if a is None or b is None or b.median == 0 else a.median / b.median


def show_ratio(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:.0%}" if percent else f"{value:.2f}×"
