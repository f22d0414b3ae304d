"""The report math of `python -m bench --baseline` (bench/baseline_stats.py): medians, spreads,
paired new ÷ old ratios, and what a failed sample does to them."""

from __future__ import annotations

import pytest

from bench.baseline_stats import Run, Sample, baseline_table, ratio_of_medians, show_ratio, spread


def test_spread_is_median_and_range() -> None:
    s = spread([30.0, 10.0, 20.0, 100.0])
    assert s is not None
    assert (s.median, s.low, s.high, s.count) == (25.0, 10.0, 100.0, 4)
    assert s.show() == "25 (10–100)"


def test_spread_of_one_value_shows_no_range_and_of_none_is_none() -> None:
    one = spread([1234.4])
    assert one is not None and one.show() == "1,234"
    assert spread([]) is None


def _run() -> Run:
    # Two rounds, one pair each; in round 2 the new side ran first. Ratios: 150/100, 100/200.
    return Run([
        Sample("old", "single", 1, 0, 100.0, True), Sample("new", "single", 1, 0, 150.0, True),
        Sample("new", "single", 2, 0, 100.0, True), Sample("old", "single", 2, 0, 200.0, True),
    ])


def test_ratios_pair_samples_of_the_same_round_and_pair() -> None:
    assert sorted(_run().ratios("single")) == [0.5, 1.5]
    ratio = spread(_run().ratios("single"))
    assert ratio is not None and (ratio.median, ratio.low, ratio.high) == (1.0, 0.5, 1.5)


def test_a_failed_sample_drops_its_pair_and_its_value() -> None:
    run = _run()
    run.samples[3] = Sample("old", "single", 2, 0, 999.0, False, "3 of 4 jobs pending")
    assert run.ratios("single") == [1.5]
    assert run.values("old", "single") == [100.0]
    assert [s.detail for s in run.failures()] == ["3 of 4 jobs pending"]


def test_table_row_has_each_side_per_round_and_the_ratio() -> None:
    table = baseline_table(_run(), [("single", "single enqueue")], "ede9fd6", "working tree")
    row = table.splitlines()[2].split(" | ")
    assert row[1:5] == ["150 (100–200)", "125 (100–150)", "100 / 200", "150 / 100"]
    assert row[5] == "**1.00 (0.50–1.50)** |"


def test_a_figure_no_sample_passed_says_so() -> None:
    table = baseline_table(Run(), [("bulk", "bulk enqueue")], "a", "b")
    assert table.splitlines()[2].count("FAILED / not measured") == 3


def test_ratio_of_medians() -> None:
    assert ratio_of_medians([10.0, 30.0, 20.0], [5.0, 15.0]) == pytest.approx(2.0)
    assert ratio_of_medians([1.0], []) is None
    assert show_ratio(0.8123, percent=True) == "81%"
    assert show_ratio(1.234) == "1.23×"
    assert show_ratio(None) == "—"
