"""A handler's result is encoded once (toolkit/worker/outcomes.py): what JSON can hold is stored,
ctx.wait_for_jobs' {job id: status} (UUID keys) is stored with the ids as text, and anything else
is a Permanent failure with a clear message, never a crash."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.retries import Permanent
from jobkit.worker.outcomes import encode_result

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text() |
                    st.floats(allow_nan=False, allow_infinity=False),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20)


@given(JSON)
def test_json_values_round_trip(value: object) -> None:
    text = encode_result(value)
    assert (text is None) == (value is None)
    if text is not None:
        assert json.loads(text) == value


@given(st.dictionaries(st.uuids(), st.sampled_from(["completed", "failed", "dead", "cancelled"]), max_size=5))
def test_uuid_keys_become_their_text(states: dict[uuid.UUID, str]) -> None:
    text = encode_result({"children": states, "n": [states]})
    assert text is not None
    as_text = {str(k): v for k, v in states.items()}
    assert json.loads(text) == {"children": as_text, "n": [as_text]}


@pytest.mark.parametrize("value", [{"x": object()}, {uuid.uuid4(): object()}, {"f": math.nan}, {(1, 2): "tuple key"}])
def test_what_json_cannot_hold_is_permanent(value: object) -> None:
    with pytest.raises(Permanent, match="not JSON-serializable"):
        encode_result(value)


@given(JSON)
def test_the_text_is_what_the_compact_encoder_writes(value: object) -> None:
    """The prebuilt C encoder writes exactly what json's compact, ASCII-only encoding does."""
    if value is not None:
        assert encode_result(value) == json.dumps(value, separators=(",", ":"), allow_nan=False)


def test_a_result_that_contains_itself_is_permanent() -> None:
    looped: dict[str, object] = {"a": 1}
    looped["self"] = [looped]
    with pytest.raises(Permanent, match="Circular reference"):
        encode_result(looped)
