"""One list of lifecycle steps, one name per step (issue 22, item 4).

The Backend protocol lists the steps (``steps()``). Each step has a Statement of its name that runs
the named query of its name, and every backend implements it with the protocol's parameters. The
API schema's RPC wrappers carry the same names (checked against the deployed schema in
tests/integration/test_supabase_backend.py::test_api_functions_are_for_service_role_only). Adding a
step therefore touches the SQL, the Statement and each backend's method, and nothing else can be
forgotten: a step missing in one of them fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from jobkit.lifecycle import Lifecycle, Statements
from jobkit.worker.backends import BACKEND_ONLY, Backend, steps
from jobkit.worker.backends.memory import MemoryBackend
from jobkit.worker.backends.postgres import PostgresBackend
from jobkit.worker.backends.supabase import SupabaseBackend

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = (PostgresBackend, SupabaseBackend, MemoryBackend)


def _public(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


def _params(fn: Any) -> list[tuple[str, Any, Any]]:
    """A method's parameters after self: (name, kind, default)."""
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]


def _methods(path: Path, cls: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {m.name: m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)}


def _string_args(method: ast.AST, call: str) -> list[str]:
    """The string literals passed first to ``self.<call>(...)`` (or ``self.<call>[...]``) in a method."""
    found = []
    for node in ast.walk(method):
        target, first = None, None
        if isinstance(node, ast.Call) and node.args:
            target, first = node.func, node.args[0]
        elif isinstance(node, ast.Subscript):
            target, first = node.value, node.slice
        if (isinstance(target, ast.Attribute) and target.attr == call
                and isinstance(first, ast.Constant) and isinstance(first.value, str)):
            found.append(first.value)
    return found


def test_the_protocol_lists_the_steps_once() -> None:
    names = steps()
    assert len(names) == len(set(names)) >= 20
    assert set(names) | BACKEND_ONLY == {n for n in vars(Backend) if not n.startswith("_")}


@pytest.mark.parametrize("step", steps())
def test_every_step_has_a_statement_of_its_name(step: str) -> None:
    assert _params(getattr(Statements, step)) == _params(getattr(Backend, step)), step


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_every_backend_implements_every_step_with_its_parameters(backend: type) -> None:
    for step in (*steps(), *BACKEND_ONLY):
        method = getattr(backend, step, None)
        assert inspect.iscoroutinefunction(method), f"{backend.__name__}.{step} is missing or not async"
        assert _params(method) == _params(getattr(Backend, step)), f"{backend.__name__}.{step}"


def test_every_statement_runs_the_query_of_its_name() -> None:
    """Statements' methods are exactly the named queries of jobs.sql and worker.sql, each its own."""
    methods = _methods(ROOT / "toolkit" / "lifecycle.py", "Statements")
    used = {name: _string_args(m, "q") for name, m in methods.items() if name != "__init__"}
    assert {name: q for name, q in used.items() if q != [name]} == {}
    names = {m for f in ("jobs.sql", "worker.sql")
             for m in re.findall(r"^-- name: (\w+)$", (ROOT / "sql" / "queries" / f).read_text(), re.M)}
    assert names == set(used)


# A step that may run another form of its statement first: save_steps sends plain steps' records
# as save_steps_direct (one prepared statement of its own), and save_steps when that refuses them.
OTHER_FORMS = {"save_steps": {"save_steps_direct"}}


def test_postgres_and_lifecycle_run_the_statement_of_the_same_name() -> None:
    """Their steps are Statements run as they are (step()), or a method of the same name that adds
    only the empty batch's shortcut; both only ever call the Statement of their own name (and the
    PostgreSQL backend's save_steps its direct form, OTHER_FORMS)."""
    for cls, path in ((PostgresBackend, "worker/backends/postgres.py"), (Lifecycle, "lifecycle.py")):
        assert _public(cls) - {"open", "close", "listen"} <= _public(Statements), cls.__name__
        derived = {n for n, v in vars(cls).items() if getattr(v, "__wrapped__", None) is not None}
        assert all(vars(cls)[n].__wrapped__ is getattr(Statements, n) for n in derived)
        for name, method in _methods(ROOT / "toolkit" / path, cls.__name__).items():
            if name not in ("__init__", "open", "close", "listen"):
                called = {c.func.attr for c in ast.walk(method) if isinstance(c, ast.Call)
                          and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Attribute)
                          and c.func.value.attr == "sql"}
                other = OTHER_FORMS.get(name, set()) if cls is PostgresBackend else set()
                assert name in called and called <= {name} | other, (cls.__name__, name, called)


def test_supabase_calls_the_rpc_of_the_step_name() -> None:
    for name, method in _methods(ROOT / "toolkit" / "worker" / "backends" / "supabase.py",
                                 "SupabaseBackend").items():
        assert set(_string_args(method, "_rpc")) <= {name}, name
