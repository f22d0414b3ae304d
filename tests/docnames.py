"""What a doc names in backticks, checked against the tree: every file path exists, every Python name
(``module.function``, ``Class.method``, a bare def or class) is defined in toolkit/, every SQL name
(``jobkit.function``, a bare function, table, view or query name) is defined in sql/.

Rules, per backticked span (fenced code blocks are not read):
- spans with a space, ``<``, ``=`` or a leading ``-`` are commands or examples: not checked;
- a trailing ``(...)`` is dropped (``wait()``, ``wake(type)``);
- a span with ``/`` or a file extension is a path (``*`` globs): it exists under the repository
  root, under toolkit/, or under a folder named in the first cell of the same table row; a bare
  file name anywhere under toolkit/, sql/, templates/, tests/, bench/ or docs/;
- ``/word`` is an HTTP route: a string literal in toolkit/;
- ``jobkit.name``: an attribute of the ``jobkit`` package or an SQL function of the jobkit schema;
- ``a.b``: ``a`` a toolkit module (file stem) or class that defines ``b``;
- a bare name: a Python def/class/module-level name in toolkit/ or tests/*.py, an SQL function,
  table, view, trigger or query name in sql/, a migration's history name (``0001_baseline``, or a
  pre-squash row ``toolkit/schema/presquash.py`` lists), or an installed module (``opentelemetry``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE_EXTENSIONS = (".py", ".sql", ".md", ".toml", ".html", ".json", ".sh", ".yml", ".yaml")
_TREE = ("toolkit", "sql", "templates", "tests", "bench", "docs")
_SPAN = re.compile(r"`([^`\n]+)`")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SQL_DEF = re.compile(
    r"create\s+(?:or\s+replace\s+)?(function|table|view|materialized\s+view|trigger)\s+"
    r"(?:if\s+not\s+exists\s+)?(?:(?:\{\{\s*\w+\s*\}\}|\"?\w+\"?)\.)?\"?(\w+)", re.IGNORECASE)
_QUERY_NAME = re.compile(r"^--\s*name:\s*(\w+)", re.MULTILINE)


@dataclass
class Names:
    """Everything a doc may name, read from the tree once."""

    root: Path
    python: set[str] = field(default_factory=set)  # every def/class/module-level name in toolkit/
    members: dict[str, set[str]] = field(default_factory=dict)  # module stem or class -> its names
    package: set[str] = field(default_factory=set)  # what `import jobkit` offers
    sql_functions: set[str] = field(default_factory=set)
    sql_other: set[str] = field(default_factory=set)  # tables, views, triggers, query names, history
    routes: set[str] = field(default_factory=set)  # HTTP paths the toolkit serves ("/run", "/healthz")

    @classmethod
    def read(cls, root: Path = ROOT) -> Names:
        names = cls(root)
        for path in [*sorted((root / "toolkit").rglob("*.py")), *sorted((root / "tests").glob("*.py"))]:
            names._python(path)
        for path in sorted((root / "sql").rglob("*.sql")):
            names._sql(path.read_text(encoding="utf-8"))
            if path.parent.name == "migrations":
                names.sql_other.add(path.stem)
        presquash = root / "toolkit" / "schema" / "presquash.py"
        if presquash.is_file():
            rows = re.findall(r"\(\"(\d{4})\", \"(\w+)\"", presquash.read_text(encoding="utf-8"))
            names.sql_other |= {f"{version}_{name}" for version, name in rows}
        names.routes = {route for path in (root / "toolkit").rglob("*.py")
                        for route in re.findall(r"[\"'](/[a-z]+)[\"']", path.read_text(encoding="utf-8"))}
        return names

    def _python(self, path: Path) -> None:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = self.members.setdefault(path.stem, set())
        for node in tree.body:
            module |= _defined(node)
            if path.stem == "__init__" and path.parent.name == "toolkit":
                self.package |= _defined(node) | _imported(node)
        for inner in ast.walk(tree):
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.python.add(inner.name)
            if isinstance(inner, ast.ClassDef):
                members = self.members.setdefault(inner.name, set())
                for item in inner.body:
                    members |= _defined(item)
        self.python |= module

    def _sql(self, text: str) -> None:
        for kind, name in _SQL_DEF.findall(text):
            (self.sql_functions if kind.lower() == "function" else self.sql_other).add(name)
        self.sql_other |= set(_QUERY_NAME.findall(text))


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _imported(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.ImportFrom | ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return set()


def spans(markdown: str) -> list[tuple[str, list[str]]]:
    """Each backticked span outside fenced blocks, with the folders named in its table row's first
    cell (relative paths in that row resolve against them)."""
    found: list[tuple[str, list[str]]] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        folders: list[str] = []
        if line.startswith("|"):
            cells = line.split("|")
            folders = [_folder(s) for s in _SPAN.findall(cells[1] if len(cells) > 1 else "")]
        found.extend((span, folders) for span in _SPAN.findall(line))
    return found


def _folder(span: str) -> str:
    span = span.strip()
    return span if span.endswith("/") else span.rsplit("/", 1)[0] + "/" if "/" in span else ""


def missing(markdown: str, names: Names) -> list[str]:
    """Every backticked name in ``markdown`` that the tree does not have, with why."""
    problems = []
    for raw, folders in spans(markdown):
        problem = _check(raw.strip(), folders, names)
        if problem:
            problems.append(f"`{raw}`: {problem}")
    return problems


def _check(span: str, folders: list[str], names: Names) -> str | None:
    if not span or any(c in span for c in " <=") or span.startswith("-"):
        return None
    span = re.sub(r"\(.*\)$", "", span)
    if re.fullmatch(r"/[a-z]+", span):
        return None if span in names.routes else "no such HTTP route in toolkit/"
    if "/" in span or span.endswith(FILE_EXTENSIONS):
        return None if _path_exists(span, folders, names.root) else "no such file or folder"
    if re.fullmatch(rf"{_IDENT}(\.{_IDENT})+", span):
        return _dotted(span, names)
    if re.fullmatch(r"\w+", span):
        known = names.python | names.sql_functions | names.sql_other
        if span in known or (span.isidentifier() and _importable(span)):
            return None
        return "not defined in toolkit/ or tests/*.py (Python), nor in sql/, nor an installed module"
    return None


def _dotted(span: str, names: Names) -> str | None:
    head, _, rest = span.partition(".")
    if head == "jobkit" and "." not in rest:
        return None if rest in names.package | names.sql_functions else \
            "neither in the jobkit package nor an SQL function"
    owner, _, name = span.rpartition(".")
    owner = owner.rsplit(".", 1)[-1]
    if owner not in names.members:
        return f"no toolkit module or class {owner}"
    return None if name in names.members[owner] else f"{owner} defines no {name}"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _path_exists(span: str, folders: list[str], root: Path) -> bool:
    if "/" not in span:  # a bare file name: anywhere in the tree jobkit ships or tests
        return any(next((root / top).rglob(span), None) for top in _TREE if (root / top).is_dir())
    for base in ("", "toolkit/", *folders):
        candidate = base + span.rstrip("/")
        if "*" in candidate:
            if any(root.glob(candidate)):
                return True
        elif (root / candidate).exists():
            return True
    return False
