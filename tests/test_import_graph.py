"""The shape of ``src/starforge``'s imports: no cycles, and DESIGN.md's three places kept apart.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` at module level and inside functions, relative ones resolved. An import under
``if TYPE_CHECKING:`` never runs, so it makes no cycle, but it still counts for the layer rules:
a type from the server in the CLI is a dependency on the server all the same.

``from pkg import name`` depends on ``pkg.name`` when that is a module, else on ``pkg`` itself.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "starforge"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str  # a starforge module, or the top-level name of a third-party package
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`: never executed


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / ROOT).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node with whether it sits under ``if TYPE_CHECKING:``."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, type_only))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                walk(child, True)
            for child in node.orelse:
                walk(child, type_only)
            return
        for child in ast.iter_child_nodes(node):
            walk(child, type_only)

    walk(tree, False)
    return found


def edges_of(name: str, path: Path, known: set[str]) -> list[Edge]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Edge] = []
    for node, type_only in _imports(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        for target in targets:
            if target.split(".")[0] != ROOT:
                target = target.split(".")[0]
            found.append(Edge(name, target, node.lineno, type_only))
    return found


@functools.cache
def graph() -> list[Edge]:
    mods = modules()
    known = set(mods)
    return [e for name, path in mods.items() for e in edges_of(name, path, known)]


def strongly_connected(nodes: set[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: components with more than one module, or a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1 or node in succ.get(node, ()):
                    found.append(sorted(comp))
    return found


def where(module: str) -> str:
    """``module``'s file as the repository names it (``src/starforge/...``)."""
    path = modules().get(module)
    if path is None:
        return "src/" + module.replace(".", "/") + ".py"
    return path.relative_to(SRC.parent).as_posix()


def describe(component: list[str], edges: list[Edge]) -> str:
    inside = set(component)
    lines = [f"cycle among {', '.join(component)}:"]
    for e in sorted(edges, key=lambda e: (e.source, e.line)):
        if e.source in inside and e.target in inside and not e.type_only:
            lines.append(f"    {where(e.source)}:{e.line} imports {e.target}")
    return "\n".join(lines)


def cycles() -> tuple[list[list[str]], list[Edge]]:
    edges = [e for e in graph() if not e.type_only and e.target.startswith(ROOT + ".")]
    succ: dict[str, set[str]] = {}
    for e in edges:
        succ.setdefault(e.source, set()).add(e.target)
    return strongly_connected(set(modules()), succ), edges


def test_the_graph_sees_module_level_function_level_and_relative_imports() -> None:
    edges = {(e.source, e.target) for e in graph()}
    # main.py imports the app inside main(): a function-level import.
    assert ("starforge.cli.main", "starforge.cli.app") in edges
    assert ("starforge.cli.app", "starforge.cli.cmd_job") in edges
    assert ("starforge.cli.main", "typer") in edges


def test_the_cycle_finder_reports_a_cycle_and_ignores_a_chain() -> None:
    succ = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert strongly_connected(set("abcde"), succ) == [["a", "b", "c"], ["e"]]
    assert strongly_connected({"a", "b"}, {"a": {"b"}}) == []


def test_src_starforge_has_no_import_cycles() -> None:
    found, edges = cycles()
    assert not found, "import cycles:\n" + "\n".join(describe(c, edges) for c in found)


# DESIGN.md, "Three places code runs": what each place must never import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "starforge.cli": ("starforge.server",),
    "starforge.client": ("starforge.server",),
    "starforge.project": ("starforge.server",),
    "starforge.server": ("starforge.cli", "starforge.project"),
    "starforge.runner": (
        "starforge.server",
        "starforge.cli",
        "starforge.project",
        "fastapi",
        "sqlalchemy",
        "typer",
        "rich",
    ),
    "starforge.report": (
        "starforge.server",
        "starforge.cli",
        "starforge.project",
        "fastapi",
        "sqlalchemy",
        "typer",
        "rich",
    ),
}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(edges: list[Edge]) -> list[str]:
    found = []
    for e in edges:
        for place, banned in FORBIDDEN.items():
            if _within(e.source, place) and any(_within(e.target, b) for b in banned):
                kind = " (under TYPE_CHECKING)" if e.type_only else ""
                found.append(f"{where(e.source)}:{e.line} imports {e.target}{kind}")
    return sorted(found)


def test_each_place_imports_only_what_design_md_allows() -> None:
    violations = layer_violations(graph())
    assert not violations, "layer rules broken:\n" + "\n".join(violations)


def test_the_layer_check_catches_a_runner_importing_the_server() -> None:
    bad = [
        Edge("starforge.runner.main", "starforge.server.storage", 3, False),
        Edge("starforge.report.callback", "rich", 5, True),
        Edge("starforge.cli.app", "starforge.client.http", 7, False),
    ]
    assert layer_violations(bad) == [
        "src/starforge/report/callback.py:5 imports rich (under TYPE_CHECKING)",
        "src/starforge/runner/main.py:3 imports starforge.server.storage",
    ]


# DESIGN.md, "one writer of job status": the status writer imports nothing above the database
# (what a change sets off is owed as a row, server/reactions.py, and done by services' handlers).
BELOW_SERVICES = ("starforge.server.statemachine", "starforge.server.reactions")
ABOVE = ("starforge.server.services", "starforge.server.loops", "starforge.server.api")


def test_the_status_writer_imports_nothing_above_the_database() -> None:
    wrong = [
        f"{e.source} imports {e.target}"
        for e in graph()
        if e.source in BELOW_SERVICES and e.target.startswith(ABOVE)
    ]
    assert wrong == []
