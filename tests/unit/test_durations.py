from __future__ import annotations

from datetime import timedelta

import pytest
from jobkit.durations import format_duration, parse_duration
from jobkit.exceptions import ConfigError


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("250ms", 0.25), ("1.5h", 5400),
    (" 2 m ", 120),
])
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5 minutes", "-5s", "5x", "1h-"])
def test_reject(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a duration"):
        parse_duration(text, what="lease")


@pytest.mark.parametrize("text", ["30s", "5m", "1h30m", "7d", "250ms", "1d2h3m4s5ms"])
def test_round_trip(text: str) -> None:
    assert format_duration(parse_duration(text)) == text
