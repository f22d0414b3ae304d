"""The migration planner is a pure diff, tested without a database."""

from __future__ import annotations

from jobkit.schema.migrations import Applied, plan
from jobkit.schema.render import Migration


def _m(version: str, body: str = "select 1;") -> Migration:
    return Migration(version, f"m{version}", body)


def test_fresh_database_has_everything_pending() -> None:
    result = plan([_m("0001"), _m("0002")], [])
    assert [m.version for m in result.pending] == ["0001", "0002"] and result.head is None
    assert not result.up_to_date


def test_applied_ones_are_skipped() -> None:
    local = [_m("0001"), _m("0002")]
    result = plan(local, [Applied("0001", "m0001", local[0].checksum)])
    assert [m.version for m in result.pending] == ["0002"] and result.head == "0001"


def test_changed_and_unknown() -> None:
    local = [_m("0101")]
    result = plan(local, [Applied("0101", "m0101", "0" * 64), Applied("0109", "later", "x")])
    assert result.changed[0][0].version == "0101" and [a.version for a in result.unknown] == ["0109"]
    assert not result.up_to_date and result.head == "0109"


def test_the_recut_migrations_are_recorded_anew_not_drift() -> None:
    """0001..0013 lost their functions in issue 22: a database with their old checksums is not
    drift, but only under the same names, and a later migration's changed checksum still is."""
    local = [_m("0001"), _m("0013"), _m("0014")]
    result = plan(local, [Applied("0001", "m0001", "0" * 64), Applied("0013", "renamed", "1" * 64),
                          Applied("0014", "m0014", "2" * 64)])
    assert [m.version for m in result.recut] == ["0001"]
    assert [a.version for a, _m in result.changed] == ["0013", "0014"]
    assert not result.up_to_date


def test_up_to_date() -> None:
    local = [_m("0001")]
    assert plan(local, [Applied("0001", "m0001", local[0].checksum)]).up_to_date
