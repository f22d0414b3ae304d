"""Which names in a SQL statement the server would look up through the session's search_path.

A function, type or relation written ``schema.name``, and an operator written
``OPERATOR(pg_catalog.op)``, resolve in that schema only, whatever the search_path: an object
planted in ``public`` (or anywhere else on the path) can never be chosen. Everything else is a
lookup the search_path decides, so it is reported here: an unqualified function, type, relation or
operator, and the syntax that looks an operator up by its bare name (``IN (...)``, ``LIKE``,
``BETWEEN``, ``IS DISTINCT FROM``, ``NULLIF``, ``CASE x WHEN``, ``JOIN ... USING``, ``ORDER BY ...
USING``). Keyword types (``int``, ``interval``) and syntax (``coalesce``, ``extract``, ``current_user``)
come out of the grammar already naming pg_catalog. Function bodies are string constants, not
parsed here: they pin their own search_path (tests/integration/test_security.py).

The parser is pglast (PostgreSQL's own parser, a dev dependency).
"""

from __future__ import annotations

import re
from typing import Any

import pglast
from pglast import ast
from pglast.visitors import Visitor

#: A_Expr kinds that take an operator name (written OPERATOR(schema.op) when qualified).
_OPERATOR_KINDS = {"AEXPR_OP", "AEXPR_OP_ANY", "AEXPR_OP_ALL"}


def dollar_params(sql: str) -> str:
    """psycopg's ``%(name)s`` / ``%s`` placeholders (``%(name)b``: sent in binary) as ``$n`` (and
    ``%%`` as ``%``), for the parser."""
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        key = m.group(1) or f"#{len(numbers)}"
        numbers.setdefault(key, len(numbers) + 1)
        return f"${numbers[key]}"

    return re.sub(r"%%|%\((\w+)\)[sb]|%s", number, sql)


def _names(nodes: Any) -> list[str]:
    return [str(n.sval) for n in nodes or () if isinstance(n, ast.String)]


class _Lookups(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.relations: list[str] = []
        self.ctes: set[str] = set()

    def visit_CommonTableExpr(self, _ancestors: Any, node: ast.CommonTableExpr) -> None:
        self.ctes.add(str(node.ctename))

    def visit_FuncCall(self, _ancestors: Any, node: ast.FuncCall) -> None:
        names = _names(node.funcname)
        if len(names) < 2:
            self.found.append(f"function {names[-1]}()")

    def visit_A_Expr(self, _ancestors: Any, node: ast.A_Expr) -> None:
        names, kind = _names(node.name), getattr(node.kind, "name", "")
        if kind not in _OPERATOR_KINDS:
            self.found.append(f"{kind.removeprefix('AEXPR_').lower()} ({names[-1]})")
        elif names[:-1] != ["pg_catalog"]:
            self.found.append(f"operator {'.'.join(names)}")

    def visit_SubLink(self, _ancestors: Any, node: ast.SubLink) -> None:
        names = _names(node.operName)
        if not names and getattr(node.subLinkType, "name", "") in ("ANY_SUBLINK", "ALL_SUBLINK"):
            names = ["="]  # x IN (select ...)
        if names and names[:-1] != ["pg_catalog"]:
            self.found.append(f"subquery operator {'.'.join(names)}")

    def visit_SortBy(self, _ancestors: Any, node: ast.SortBy) -> None:
        names = _names(node.useOp)
        if names and names[:-1] != ["pg_catalog"]:
            self.found.append(f"order by using {'.'.join(names)}")

    def visit_TypeName(self, _ancestors: Any, node: ast.TypeName) -> None:
        names = _names(node.names)
        if len(names) < 2:
            self.found.append(f"type {names[-1]}")

    def visit_CollateClause(self, _ancestors: Any, node: ast.CollateClause) -> None:
        names = _names(node.collname)
        if len(names) < 2:
            self.found.append(f"collation {names[-1]}")

    def visit_IndexElem(self, _ancestors: Any, node: ast.IndexElem) -> None:
        names = _names(node.opclass)
        if names and len(names) < 2:
            self.found.append(f"operator class {names[-1]}")

    def visit_CaseExpr(self, _ancestors: Any, node: ast.CaseExpr) -> None:
        if node.arg is not None:
            self.found.append("case x when (=)")

    def visit_JoinExpr(self, _ancestors: Any, node: ast.JoinExpr) -> None:
        if node.usingClause or node.isNatural:
            self.found.append("join using (=)")

    def visit_RangeVar(self, _ancestors: Any, node: ast.RangeVar) -> None:
        if not node.schemaname:
            self.relations.append(str(node.relname))


def unqualified(sql: str) -> list[str]:
    """Every name in ``sql`` (one or more statements, psycopg placeholders allowed) that the
    search_path would resolve, described; [] when there is none."""
    lookups = _Lookups()
    lookups(pglast.parse_sql(dollar_params(sql)))
    return lookups.found + [f"relation {r}" for r in lookups.relations if r not in lookups.ctes]


class _Used(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.operators: set[str] = set()
        self.functions: set[str] = set()

    def visit_A_Expr(self, _ancestors: Any, node: ast.A_Expr) -> None:
        self.operators.add(_names(node.name)[-1])

    def visit_FuncCall(self, _ancestors: Any, node: ast.FuncCall) -> None:
        names = _names(node.funcname)
        if names[:-1] == ["pg_catalog"]:
            self.functions.add(names[-1])


def used_builtins(texts: list[str]) -> tuple[set[str], set[str]]:
    """The operator names, and the names of pg_catalog's functions, that ``texts`` use."""
    used = _Used()
    for sql in texts:
        used(pglast.parse_sql(dollar_params(sql)))
    return used.operators, used.functions
