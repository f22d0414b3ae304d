"""[triggers.<name>] in jobkit.toml (issue 24): good declarations parse; any bad one is refused by the
one config reader with a one-line ConfigError that carries a hint naming the fix."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jobkit.config import parse_settings
from jobkit.exceptions import ConfigError

GOOD = {"table": "public.orders", "on": ["update"], "type": "send_receipt", "payload": "row",
        "when": "new.status = 'paid' and old.status is distinct from 'paid'", "idempotency": "pk"}


def _parse(**body: Any) -> Any:
    return parse_settings({"triggers": {"receipt": body}}).triggers["receipt"]


def test_the_issue_examples_parse() -> None:
    receipt = _parse(**GOOD)
    assert (receipt.schema, receipt.table, receipt.on, receipt.payload, receipt.idempotency) == (
        "public", "orders", ("update",), "row", "pk")
    welcome = parse_settings({"triggers": {"welcome": {
        "table": "auth.users", "on": ["insert"], "type": "send_welcome", "payload": ["id", "email"]}}})
    w = welcome.triggers["welcome"]
    assert (w.qualified, w.payload, w.when, w.idempotency) == ("auth.users", ("id", "email"), None, None)
    assert w.trigger_name("jobkit", "insert") == "jobkit_welcome_ins"
    assert _parse(table="orders", on="DELETE", type="t").on == ("delete",)


@pytest.mark.parametrize(("change", "message"), [
    ({"table": "a.b.c"}, "is not a table name"),
    ({"table": "pg_catalog.pg_class"}, "is a system table"),
    ({"on": []}, "on must be a non-empty list"),
    ({"on": ["truncate"]}, "is not an operation"),
    ({"on": ["insert", "insert"]}, "lists an operation twice"),
    ({"type": "bad type!"}, "not a valid name"),
    ({"payload": "everything"}, "payload must be"),
    ({"payload": ["id", "id"]}, "lists a column twice"),
    ({"payload": ["id; drop"]}, "payload must be"),
    ({"when": "  "}, "when must be a non-empty SQL condition"),
    ({"when": "true; delete from orders"}, "no ';'"),
    ({"idempotency": "row"}, "idempotency must be"),
    ({"colour": "red"}, "unknown key 'colour'"),
])
def test_bad_declarations_are_one_line_errors_with_a_fix(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _parse(**{**GOOD, **change})
    assert "\n" not in caught.value.message and caught.value.hint


def test_a_name_and_required_keys() -> None:
    with pytest.raises(ConfigError, match="trigger name 'Bad-Name' is not valid"):
        parse_settings({"triggers": {"Bad-Name": GOOD}})
    with pytest.raises(ConfigError, match=r"\[triggers.receipt\] needs table"):
        _parse(on=["insert"], type="t")
    with pytest.raises(ConfigError, match="is over 63 bytes"):
        parse_settings({"schema": "j" * 30, "triggers": {"t" * 40: GOOD}})


VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30),
                   st.lists(st.text(max_size=12), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                               max_size=2))


@given(key=st.sampled_from(sorted(GOOD)), value=VALUES)
def test_any_value_is_accepted_whole_or_refused_in_one_line(key: str, value: Any) -> None:
    try:
        parsed = _parse(**{**GOOD, key: value})
    except ConfigError as exc:
        assert "\n" not in exc.message and exc.message.startswith(("[triggers.receipt]", "job type"))
        assert exc.hint
        return
    assert parsed.name == "receipt" and parsed.on and set(parsed.on) <= {"insert", "update", "delete"}
    assert parsed.when is None or (";" not in parsed.when and parsed.when.strip() == parsed.when)


@given(body=st.dictionaries(st.sampled_from([*GOOD, "extra"]), VALUES, max_size=7))
def test_any_table_parses_or_raises_config_error_only(body: dict[str, Any]) -> None:
    try:
        _parse(**body)
    except ConfigError as exc:
        assert "\n" not in exc.message and exc.hint
