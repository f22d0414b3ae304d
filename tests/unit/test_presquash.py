"""The table of pre-squash layouts (jobkit.schema.presquash) is consistent with itself and with the
bridge files; the integration tests (tests/integration/test_upgrade.py) check it against the SQL
each layout deployed."""

from __future__ import annotations

import pytest
from jobkit.config import Settings
from jobkit.exceptions import DeployError
from jobkit.schema import presquash
from jobkit.schema.render import render_bridge, render_migrations


def test_each_layout_is_one_distinct_ordered_history() -> None:
    assert len({layout.rows for layout in presquash.LAYOUTS}) == len(presquash.LAYOUTS) == 15
    for layout in presquash.LAYOUTS:
        versions = [version for version, _name, _checksum in layout.rows]
        assert versions == sorted(set(versions)) and versions[0] == "0001"
        assert all((version, name) in presquash.NAMES for version, name, _c in layout.rows)
        assert all(len(checksum) == 64 for _v, _n, checksum in layout.rows)


def test_the_bridged_layouts_are_main_from_d02410c_to_the_squash() -> None:
    bridged = [layout.first for layout in presquash.LAYOUTS if layout.steps is not None]
    assert bridged == ["d02410c", "5629121", "c1f365e", "b0c33b0", "ede9fd6", "4fd40c1", "bfdb5ad", "3118562"]
    assert presquash.LAYOUTS[-1].last == "57b8576"  # the last commit before the squash (e0ca19e)
    for layout in presquash.LAYOUTS:
        for step in layout.steps or ():
            assert render_bridge(Settings(), step).strip()
        assert layout.steps is None or "delivery" in layout.steps or layout.first in {"4fd40c1", "bfdb5ad", "3118562"}


def test_recognition_is_exact() -> None:
    ede = presquash.LAYOUTS[11]
    assert ede.first == "ede9fd6" and presquash.layout_of(list(ede.rows), "jobkit") is ede
    assert presquash.layout_of(list(reversed(ede.rows)), "jobkit") is ede  # row order does not matter
    with pytest.raises(DeployError, match="checksums this jobkit does not know"):
        presquash.layout_of([*ede.rows[:3], ("0004", "hot_path", "0" * 64)], "jobkit")
    with pytest.raises(DeployError, match="checksums this jobkit does not know"):
        presquash.layout_of(list(ede.rows[:2]), "jobkit")  # a deploy that stopped before 0003
    # ... one that stopped before 0004 has the history main's d02410c deployed, and is bridged as that
    assert presquash.layout_of(list(ede.rows[:3]), "jobkit").first == "d02410c"
    with pytest.raises(DeployError, match="recorded for schema jobkit, this one is jobs"):
        presquash.layout_of([*ede.rows[:3], ("0004", "hot_path", "0" * 64)], "jobs")
    with pytest.raises(DeployError, match=r"development layout .* main at 2952cf9\.\.32db97f"):
        presquash.layout_of(list(presquash.LAYOUTS[0].rows), "jobkit")


def test_todays_history_is_not_presquash() -> None:
    today = [(m.version, m.name, m.checksum) for m in render_migrations(Settings())]
    assert not presquash.is_presquash(today)
    assert presquash.is_presquash([("0001", "core", "x")])
