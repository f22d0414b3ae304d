"""No import cycle in jobkit (issue 22, item 3). The graph is read from the source with ``ast``, not
from what Python happened to import: every ``import`` counts, those inside functions (a lazy import
is how the cycle context → handlers → testing → drain → outcomes → recording → handlers was hidden)
and those under ``if TYPE_CHECKING:`` alike. Only the imports a module names count, not the
packages Python runs on the way (``jobkit/__init__.py`` imports the public API, so every module
would otherwise be in a cycle with it)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "toolkit"
PACKAGE = "jobkit"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    lazy: bool  # inside a function: runs only when it is called

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}{', inside a function' if self.lazy else ''})"


def module_names(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package: its dotted name (a package: the name of its __init__) -> file."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> list[Edge]:
    """The modules of ``known`` that ``name`` (in ``path``) imports, with where and how."""
    tree = ast.parse(path.read_text(), str(path))
    lazy_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                  for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [_known(a.name, known) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(here, node.level, node.module)
            targets = [_known(f"{base}.{a.name}", known) or _known(base, known) for a in node.names]
        else:
            continue
        edges += [Edge(name, t, node.lineno, node.lineno in lazy_lines)
                  for t in dict.fromkeys(targets) if t is not None and t != name]
    return edges


def _absolute(here: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = here.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _known(dotted: str, known: set[str]) -> str | None:
    """The longest prefix of ``dotted`` that is one of the package's modules (None: outside it)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, list[Edge]]:
    modules = module_names(root, package)
    return {name: imports(name, path, set(modules)) for name, path in modules.items()}


def cycles(edges: dict[str, list[Edge]]) -> list[list[Edge]]:
    """The cycles (each as its edges) in the graph: Tarjan's strongly connected components, then in
    each component of more than one module a shortest cycle through each of its modules (duplicates
    dropped), so that two cycles sharing a module are both shown."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules (~100)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in edges.get(v, []):
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    found: dict[frozenset[tuple[str, str]], list[Edge]] = {}
    for component in sorted(sorted(c) for c in components if len(c) > 1):
        for start in component:
            loop = _loop(start, set(component), edges)
            found.setdefault(frozenset((e.source, e.target) for e in loop), loop)
    return list(found.values())


def _loop(start: str, inside: set[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    """A shortest cycle from ``start`` back to it, inside its component."""
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for e in edges[v]:
                if e.target not in inside or e.target in came:
                    continue
                came[e.target] = e
                if e.target == start:
                    path = [e]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                following.append(e.target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(found: list[list[Edge]]) -> str:
    return "\n\n".join(
        " -> ".join([c[0].source, *(e.target for e in c)]) + "\n  " + "\n  ".join(map(str, c)) for c in found)


def test_jobkit_has_no_import_cycle() -> None:
    found = cycles(graph())
    assert not found, f"{len(found)} import cycle(s) in toolkit/:\n\n{describe(found)}"


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checker itself: a relative, an absolute, a parent-relative and a lazy import each make an
    edge, a package's ``from . import x`` names the submodule, and a cycle closed only by an import
    inside a function is still found (the way the handlers → testing cycle was hidden)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from .sub.b import B\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("import pkg.c\nB = 2\n")
    (pkg / "c.py").write_text("def later():\n    from .a import A\n    return A\n")
    (pkg / "d.py").write_text("from .sub import b\nfrom .. import elsewhere\nimport os\n")
    g = graph(pkg, "pkg")
    assert {str(e) for es in g.values() for e in es} == {
        "pkg -> pkg.a (line 1)", "pkg.a -> pkg.sub.b (line 1)", "pkg.sub -> pkg.sub.b (line 1)",
        "pkg.sub.b -> pkg.c (line 1)", "pkg.c -> pkg.a (line 2, inside a function)",
        "pkg.d -> pkg.sub.b (line 1)"}
    found = cycles(g)
    assert [[e.source for e in c] for c in found] == [["pkg.a", "pkg.sub.b", "pkg.c"]]
    assert found[0][-1].lazy and "inside a function" in describe(found)
    (pkg / "c.py").write_text("def later():\n    return 3\n")
    assert cycles(graph(pkg, "pkg")) == []
