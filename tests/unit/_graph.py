"""The import graph of ctrexec's hand-written modules, read from the source text.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING:``.
A function-level import defers a cost; it does not remove the dependency, and a cycle
through one is still a cycle a reader has to hold in mind.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ctrexec

PKG = Path(ctrexec.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def hand_written() -> dict[str, Path]:
    return {
        module_name(p): p
        for p in sorted(PKG.rglob("*.py"))
        if "_api" not in p.relative_to(PKG).parts
    }


def target(name: str, modules: dict[str, Path]) -> str | None:
    """The hand-written module an imported dotted name lives in (``a.b.C`` → ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported(source: str) -> set[str]:
    """Every ctrexec name the source imports, wherever the import statement stands."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n.startswith("ctrexec.")}


def graph() -> dict[str, set[str]]:
    """Module → the hand-written modules it imports (the package root left out: it is
    the public face, which re-exports everything and which nothing inside imports)."""
    modules = hand_written()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = {target(n, modules) for n in imported(path.read_text())}
        edges[name] = {d for d in deps if d and d not in (name, "ctrexec")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)
