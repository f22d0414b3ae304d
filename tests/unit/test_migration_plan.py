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
    local = [_m("0001")]
    result = plan(local, [Applied("0001", "m0001", "0" * 64), Applied("0009", "later", "x")])
    assert result.changed[0][0].version == "0001" and [a.version for a in result.unknown] == ["0009"]
    assert not result.up_to_date and result.head == "0009"


def test_up_to_date() -> None:
    local = [_m("0001")]
    assert plan(local, [Applied("0001", "m0001", local[0].checksum)]).up_to_date
