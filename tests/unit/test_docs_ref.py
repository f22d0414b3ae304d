"""The generated reference pages (toolkit/docs_ref.py) are what the code says now, and every
jobkit.toml key's documented default and limit is what the config reader does: each is probed
through parse_settings, so a changed default or limit fails here until the page follows."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from jobkit import docs_ref
from jobkit.config import CONCURRENCY_FIELDS, MAINTENANCE_DEFAULTS, parse_settings
from jobkit.exceptions import ConfigError

ROOT = Path(__file__).parents[2]
BASE: dict[str, Any] = {"ratelimits": {"k": {"rate": "1/s"}}, "user_api": {"schema": "jobkit_user", "types": ["t"]}}


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    for path, text in docs_ref.pages(ROOT / "docs").items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: python -m jobkit.docs_ref"


def test_every_error_class_is_on_the_errors_page_with_its_exit_code() -> None:
    page = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    classes = docs_ref.error_classes()
    assert {c.__name__ for c in classes} >= {"JobkitError", "ConfigError", "DriftError", "WaitTimeout"}
    for cls in classes:
        assert f"| `{cls.__name__}` | `{cls.__mro__[1].__name__}` | {cls.exit_code} |" in page


def _doc(table: str, key: str, value: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {k: dict(v) for k, v in BASE.items()}
    doc["ratelimits"]["k"] = dict(BASE["ratelimits"]["k"])
    node: dict[str, Any] = doc
    for part in [p for p in table.replace("NAME", "t").replace("KEY", "k").split(".") if p]:
        node = node.setdefault(part, {})
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    if table == "schedules.NAME":
        node.setdefault("every" if key != "every" else "type", "1m" if key != "every" else "t")
        if key in ("type", "sql"):
            node.setdefault("every", "1m")
        if key == "cron":
            node.pop("every", None)
            node.setdefault("type", "t")
        if key == "every":
            node.setdefault("type", "t")
    return doc


def _parse(doc: dict[str, Any]) -> Any:
    return parse_settings(doc)


def _literal(text: str) -> Any:
    return tomllib.loads(f"v = {text}")["v"]


@pytest.mark.parametrize("key", [k for k in docs_ref.KEYS if k.default not in ("none", "required", "as [defaults]")],
                         ids=lambda k: f"[{k.table}] {k.key}")
def test_writing_a_documented_default_changes_nothing(key: docs_ref.Key) -> None:
    base_doc: dict[str, Any] = dict(BASE)
    if key.table == "types.NAME":
        base_doc["types"] = {"t": {}}
    base = _parse(base_doc)
    assert _parse(_doc(key.table, key.key, _literal(key.default))) == base


@pytest.mark.parametrize("key", [k for k in docs_ref.KEYS if re.match(r"integer, ", k.limit)],
                         ids=lambda k: f"[{k.table}] {k.key}")
def test_a_documented_integer_limit_is_the_readers(key: docs_ref.Key) -> None:
    low, high = (int(n.replace(",", "")) for n in re.findall(r"[\d,]*\d", key.limit)[:2])
    for ok in (low, high):
        _parse(_doc(key.table, key.key, ok))
    for bad in (low - 1, high + 1):
        with pytest.raises(ConfigError):
            _parse(_doc(key.table, key.key, bad))


@pytest.mark.parametrize("key", [k for k in docs_ref.KEYS if re.match(r"a duration, 1s to ", k.limit)],
                         ids=lambda k: f"[{k.table}] {k.key}")
def test_a_documented_duration_limit_is_the_readers(key: docs_ref.Key) -> None:
    high = key.limit.split(" to ")[1]
    _parse(_doc(key.table, key.key, high))
    with pytest.raises(ConfigError):
        _parse(_doc(key.table, key.key, high + "1s"))


def test_every_key_the_reader_accepts_is_documented() -> None:
    tree = ast.parse((ROOT / "toolkit" / "config.py").read_text(encoding="utf-8"))
    accepted = set(CONCURRENCY_FIELDS) | set(MAINTENANCE_DEFAULTS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "only":
            accepted |= {e.value for e in getattr(node.args[1], "elts", []) if isinstance(e, ast.Constant)}
    documented = {part for k in docs_ref.KEYS for part in k.key.split(".")} | {k.table.split(".")[0] for k in docs_ref.KEYS}
    assert accepted - documented == set(), "document these keys in toolkit/docs_ref.py KEYS"
    assert len(accepted) >= 30
