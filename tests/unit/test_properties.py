"""Property-based: every input to the validators either works or gives one ConfigError (never another
exception, never a value that would break later). Bounded for CI by the "ci" profile (conftest)."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.cli.enqueue import _payload
from jobkit.config import load_settings, parse_settings
from jobkit.cron.spec import every, next_run, validate
from jobkit.durations import MAX_SECONDS, parse_duration
from jobkit.exceptions import ConfigError
from jobkit.names import MAX_NAME_BYTES
from jobkit.validate import schema, type_name

DURATION_TEXT = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\A[0-9]{1,15}(\.[0-9]{1,3})?(ms|s|m|h|d)([0-9]{1,4}(ms|s|m|h|d))?\Z"),
)
CRON_FIELD = st.one_of(st.just("*"), st.from_regex(r"\A(\*/)?[0-9]{1,2}(-[0-9]{1,2})?\Z"))
CRON_TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(CRON_FIELD, min_size=4, max_size=6).map(" ".join),
    st.from_regex(r"\A[0-9]{1,3} seconds?\Z"),
)
NAME_TEXT = st.one_of(st.text(max_size=80), st.from_regex(r"\A[a-z_][a-z0-9_]{0,70}\n?\Z"))
TOML_VALUE = st.one_of(st.text(max_size=20), st.integers(), st.floats(allow_nan=False), st.booleans(),
                       DURATION_TEXT)


@given(DURATION_TEXT)
def test_durations_parse_or_refuse(text: str) -> None:
    try:
        value = parse_duration(text)
    except ConfigError:
        return
    assert timedelta(0) <= value <= timedelta(seconds=MAX_SECONDS)


@given(NAME_TEXT)
def test_schema_names_are_whole_identifiers_or_refused(text: str) -> None:
    try:
        name = schema(text)
    except ConfigError as exc:
        assert exc.message and "\n" not in exc.message.strip("'")
        return
    assert "\n" not in name and len(name) <= MAX_NAME_BYTES and name == name.lower()
    assert f"{name}_wake".isidentifier() or f"{name}_wake".replace("_", "a").isalnum()


@given(NAME_TEXT)
def test_job_type_names(text: str) -> None:
    try:
        name = type_name(text)
    except ConfigError:
        return
    assert "\n" not in name and 1 <= len(name) <= 100


@given(CRON_TEXT)
def test_cron_specs_validate_to_something_that_fires_or_refuse(text: str) -> None:
    from datetime import UTC, datetime

    try:
        spec = validate(text, (1, 6))
    except ConfigError:
        return
    if spec == "@reboot" or "$" in spec:
        return
    assert next_run(spec, datetime(2026, 1, 1, tzinfo=UTC)) is not None  # it can fire


@given(DURATION_TEXT)
def test_every_gives_a_schedule_or_refuses(text: str) -> None:
    try:
        spec = every(text)
    except ConfigError:
        return
    assert validate(spec, (1, 6)) == spec


@given(st.dictionaries(
    st.sampled_from(["schema", "retention", "db_url", "wake", "defaults", "types", "ratelimits", "api", "x"]),
    st.one_of(TOML_VALUE, st.dictionaries(st.sampled_from(
        ["timeout", "budget", "transport", "max_attempts", "lease", "rate_limit", "rate", "burst", "schema",
         "mail", "batch_size"]), st.one_of(TOML_VALUE, st.dictionaries(st.sampled_from(
             ["max_attempts", "lease", "rate_limit", "rate", "burst"]), TOML_VALUE, max_size=3)), max_size=4)),
    max_size=5))
def test_any_config_document_loads_or_gives_one_config_error(doc: dict[str, Any]) -> None:
    try:
        parse_settings(doc)
    except ConfigError as exc:
        assert exc.message


@given(st.binary(max_size=200))
def test_any_config_file_bytes_load_or_give_one_config_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobkit.toml"
        path.write_bytes(data)
        try:
            load_settings(path, env={})
        except ConfigError as exc:
            assert exc.message


@given(st.recursive(st.none() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                max_size=3), max_leaves=20))
def test_payload_text_round_trips(value: Any) -> None:
    assert _payload(json.dumps(value)) == value


@pytest.mark.parametrize("depth", [10, 100_000])
def test_deep_payloads_parse_or_refuse(depth: int) -> None:
    text = "[" * depth + "]" * depth
    try:
        assert _payload(text) is not None
    except ConfigError as exc:
        assert "nested" in exc.message


def test_a_config_that_is_not_utf8_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "jobkit.toml"
    path.write_bytes(b'schema = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings(path, env={})



EVENT_BODY = st.dictionaries(
    st.sampled_from(["types", "retention", "x"]),
    st.one_of(TOML_VALUE, st.lists(st.one_of(st.text(max_size=12), st.integers(), NAME_TEXT), max_size=4)),
    max_size=3)


@given(st.one_of(TOML_VALUE, st.dictionaries(st.text(max_size=210), st.one_of(TOML_VALUE, EVENT_BODY), max_size=3)))
def test_any_events_table_loads_or_gives_one_config_error(events: Any) -> None:
    """[events."<name>"] (issue 25): subscribers and retention, or one ConfigError with a message."""
    try:
        settings = parse_settings({"events": events})
    except ConfigError as exc:
        assert exc.message
        return
    for name, cfg in settings.events.items():
        assert 1 <= len(name) <= 200 and "\x1f" not in name
        assert len(set(cfg.types)) == len(cfg.types) and all(type_name(t) == t for t in cfg.types)
        assert cfg.retention is None or cfg.retention >= timedelta(seconds=1)
