"""Named runtime queries: ``-- name: <query>`` blocks in sql/queries/*.sql, rendered for a schema.

Python code holds no SQL text: it asks for ``queries(schema)["claim"]`` and binds values as
``%(name)s`` parameters.

The queries run under whatever search_path the connection has: jobkit's own connections keep the
role's default (a startup ``options`` pin is ignored by Supavisor's transaction pooler, and a
session ``SET`` there would leak to other clients), ``jobkit.enqueue`` may run on the caller's own
connection, pg_cron runs the cron commands under the job owner's. So the text itself leaves nothing
to the search_path: functions, aggregates, catalog tables and types are written ``pg_catalog.name``
(or ``{{ s }}.name``), and every operator ``OPERATOR(pg_catalog.op)``: an ``IN`` list becomes
``OPERATOR(pg_catalog.=) any ('{a,b}')`` and ``LIKE`` becomes ``OPERATOR(pg_catalog.~~)``. An
operator written bare is looked up through the path: a planted ``public.||(text, integer)``
fitted ``' ' || n`` better than pg_catalog's polymorphic one and ran as the owner. Mind the
precedence: every ``OPERATOR()`` binds alike, so ``a OPERATOR(=) (b OPERATOR(-) c)`` needs its
parentheses. Keyword types (``int``, ``interval``) and syntax (``coalesce``, ``extract``) are
pg_catalog's already. tests/unit/test_sql_names.py parses every query and fails on any name left
to the search_path.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .exceptions import ResourceError
from .resources import read_text, sql_root
from .schema.render import environment, ident

_NAME_RE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@lru_cache(maxsize=16)
def queries(schema: str) -> dict[str, str]:
    """Every named query, rendered for ``schema``."""
    found: dict[str, str] = {}
    for name in sorted(set(_index().values())):
        found.update(_file(schema, name))
    return found


def query(schema: str, name: str) -> str:
    """One named query rendered for ``schema``: only the file that holds it is rendered (issue 23:
    compiling every file's template was most of a process's first ``enqueue_many``)."""
    return _file(schema, _index()[name])[name]


class Named:
    """``queries(schema)[name]`` for code that runs a few queries of one or two files."""

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def __getitem__(self, name: str) -> str:
        return query(self.schema, name)


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Which file holds each query, from the files' ``-- name:`` headers (nothing rendered)."""
    where: dict[str, str] = {}
    folder = sql_root().joinpath("queries")
    for name in sorted(n.name for n in folder.iterdir() if n.name.endswith(".sql")):
        for query_name in _NAME_RE.findall(folder.joinpath(name).read_text()):
            if query_name in where:
                raise ResourceError(f"query {query_name} is defined twice")
            where[query_name] = name
    return where


@lru_cache(maxsize=64)
def _file(schema: str, name: str) -> dict[str, str]:
    """One query file's named queries, rendered for ``schema``."""
    return dict(parse(render_file(schema, name), name))


_S = "{{ s }}"


def render_file(schema: str, name: str) -> str:
    """A query file rendered for ``schema``. A file whose only template tag is ``{{ s }}`` (jobs.sql
    among them) is rendered by substituting the quoted schema, which is what jinja would output; the
    others go through jinja (issue 23, stop 34: compiling jobs.sql's template was most of the
    client's first enqueue_many). tests/unit/test_queries_lazy.py checks the two agree."""
    raw = read_text(sql_root(), f"queries/{name}")
    rest = raw.replace(_S, "")
    if "\r" in raw or "{{" in rest or "{%" in rest or "{#" in rest:
        return jinja_file(schema, name)
    return raw.replace(_S, ident(schema))


def jinja_file(schema: str, name: str) -> str:
    """A query file rendered for ``schema`` by jinja, whatever it holds."""
    return environment().get_template(f"queries/{name}").render(schema=schema, s=ident(schema))


def parse(text: str, source: str) -> list[tuple[str, str]]:
    """Split a file into (name, sql) pairs."""
    parts = _NAME_RE.split(text)
    if parts[0].strip() and not all(
        line.startswith("--") or not line.strip() for line in parts[0].splitlines()
    ):
        raise ResourceError(f"{source}: SQL before the first `-- name:` header")
    pairs = list(zip(parts[1::2], parts[2::2], strict=True))
    return [(name, body.strip()) for name, body in pairs]
