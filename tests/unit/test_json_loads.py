"""The worker's JSON decoding of json/jsonb columns (connector/aio.py's ``_loads``): the C scanner
called directly for jsonb's text, ``JSONDecoder.decode`` for anything else; the same values and the
same errors as ``json.loads`` either way."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.connector.aio import _loads

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text() |
                    st.floats(allow_nan=False, allow_infinity=False),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20)
SPACE = st.text(alphabet=" \t\n\r", max_size=3)


@given(JSON, SPACE, SPACE, st.booleans())
def test_any_json_text_decodes_as_json_loads_does(value: object, before: str, after: str, raw: bool) -> None:
    text = before + json.dumps(value) + after
    assert _loads(text.encode() if raw else text) == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", '{"a": 1} x', "[1, 2", '{"a":}', "nul", "1 2"])
def test_what_is_not_one_json_value_raises_as_json_loads_does(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        _loads(text.encode())
    assert str(got.value) == str(expected.value)
