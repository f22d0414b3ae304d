"""The signature header is data: whatever it holds, the Verifier answers with a Verdict (401 at the
endpoint), never an exception. Found 5: a `t=` of 5,000 digits raised ValueError (Python's limit on
int() of long digit strings) before authentication, a 500 with a traceback."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from jobkit.worker.signing import Verifier, parse, sign

SECRET = "unit-secret-0123456789abcdef0123456789ab"
BODY = b'{"type": "t", "nonce": "n"}'
HEX = "ab" * 32


@pytest.mark.parametrize("header", [
    f"t={'9' * 5000},v1={HEX}",        # Found 5: ValueError from int()
    f"t={'1' * 13},v1={HEX}",          # longer than any Unix time in seconds
    f"t=\u00b2,v1={HEX}",              # '²'.isdigit() is True, int('²') raises
    f"t=\u0661\u0662,v1={HEX}",        # Arabic-Indic digits: int() accepts them, the wire never has them
    f"t=12,v1={'zz' * 32}",             # not hex
    f"t=12,v1={HEX}," + "x=y," * 1000,  # too long a header
    "t=,v1=", "=", ",,,", "t", "v1=" + HEX, "",
])
def test_malformed_headers_are_refused(header: str) -> None:
    verdict = Verifier().check(header, BODY, [SECRET])
    assert not verdict.ok and "malformed" in verdict.reason


def test_a_good_header_still_passes_and_names_its_nonce() -> None:
    now = time.time()
    header = sign(SECRET, BODY)
    verdict = Verifier().check(header, BODY, [SECRET], now=now)
    assert verdict.ok and verdict.nonce == header.split("v1=")[1] and verdict.expires > now
    again = Verifier().check(header, BODY, [SECRET], now=now)  # repeats are the database's to refuse
    assert again.ok and again.nonce == verdict.nonce


HEADER_TEXT = st.one_of(
    st.text(max_size=200),
    st.builds(lambda t, v, rest: f"t={t},v1={v}{rest}",
              st.text(alphabet=st.characters(categories=("Nd", "No")), max_size=6000),
              st.text(alphabet="0123456789abcdefABCDEFxyz", max_size=70), st.text(max_size=20)),
)


@seed(21)
@settings(derandomize=True, max_examples=300, deadline=None)
@given(HEADER_TEXT, st.binary(max_size=64))
def test_any_header_value_is_a_verdict(header: str, body: bytes) -> None:
    verdict = Verifier().check(header, body, [SECRET])
    assert not verdict.ok  # nothing random is a valid signature
    parsed = parse(header)
    assert parsed is None or (0 <= parsed[0] < 10**12 and len(parsed[1]) == 64)
