"""The operator API's selection (toolkit/ops/operate.py, toolkit/ops/selection.py) from any
outside text, as the CLI's options and the dashboard's form give it: an Operation or a one-line
ConfigError, never another exception; no database needed."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobkit.exceptions import ConfigError
from jobkit.ops.operate import MAX_IDS, Operation
from jobkit.ops.selection import FIELDS, JobFilter, parse_ids

TEXT = st.one_of(st.none(), st.text(max_size=40), st.sampled_from(
    ["dead", "pending", "nope", "{}", '{"a": 1}', "[1]", "2026-12-03", "2026-13-40", "\x00", " "]))


@settings(derandomize=True, max_examples=300, deadline=None)
@given(verb=st.sampled_from(["retry", "cancel", "delete", "purge", ""]),
       values=st.fixed_dictionaries({name: TEXT for name in FIELDS}),
       ids=st.one_of(st.none(), st.lists(st.one_of(st.uuids().map(str), st.text(max_size=40)), max_size=3)),
       everything=st.booleans())
def test_any_selection_is_an_operation_or_a_one_line_error(verb: str, values: dict[str, str | None],
                                                          ids: list[str] | None, everything: bool) -> None:
    try:
        op = Operation(verb, tuple(parse_ids(ids)) if ids is not None else None, JobFilter.parse(values),
                       everything=everything)
    except ConfigError as exc:
        assert "\n" not in exc.message and exc.message
        return
    assert op.ids is not None or not op.filter.empty or everything
    assert op.target() == ({"ids": [str(UUID(i)) for i in ids]} if ids is not None
                           else {"filter": op.filter.as_dict()})


def test_an_empty_filter_needs_everything() -> None:
    with pytest.raises(ConfigError, match="that would retry every job"):
        Operation("retry")
    assert Operation("retry", everything=True).target() == {"filter": {}}


def test_ids_are_bounded_and_exclusive_of_a_filter() -> None:
    with pytest.raises(ConfigError, match="at most"):
        Operation("cancel", tuple(UUID(int=i) for i in range(MAX_IDS + 1)))
    with pytest.raises(ConfigError, match="no jobs selected"):
        Operation("cancel", ())
    with pytest.raises(ConfigError, match="either job ids or a filter"):
        Operation("cancel", (UUID(int=1),), JobFilter(type="mail"))
