"""tasks/ and groups/: no import cycle, helpers that take what they use, one owner per fact.

Imports are counted wherever they stand: inside functions and under ``TYPE_CHECKING``
too, since either ties the modules together as much as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ctrexec
from ctrexec import defaults
from ctrexec.cli.main import build_parser
from ctrexec.tasks.config import TaskConfig

pytestmark = pytest.mark.unit

PKG = Path(ctrexec.__file__).parent


def _module(p: Path) -> str:
    parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in PKG.rglob("*.py") if "_api" not in p.parts}


def _imports(p: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    """Who imports whom; ``from ctrexec.x import y`` names the package x as well as
    y, and a package's own ``__init__`` is not an edge for its modules."""
    mods = _modules()
    return {
        m: {n for n in _imports(p) if n in mods and n != m and not m.startswith(f"{n}.")}
        for m, p in mods.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]
    sample = tmp_path / "m.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ctrexec.tasks.executor import Executor\n"
        "def f():\n    from ctrexec.groups import implicit\n"
    )
    assert {"ctrexec.tasks.executor", "ctrexec.groups.implicit"} <= _imports(sample)


#: The modules of this concern: none may stand in an import cycle.
_OURS = ("ctrexec.groups", "ctrexec.net.groupns", "ctrexec.cli")
_OURS_IN_TASKS = {
    "ctrexec.tasks.executor",
    "ctrexec.tasks.stdio",
    "ctrexec.tasks.events",
    "ctrexec.tasks.teardown",
    "ctrexec.tasks.rename",
    "ctrexec.tasks.aio",
    "ctrexec.tasks.implicitnet",
    "ctrexec.tasks.records",
    "ctrexec.tasks.control",
}


def test_no_cycle_through_the_executor_or_groups() -> None:
    tied = [
        sorted(comp)
        for comp in _cycles(_graph())
        if comp & _OURS_IN_TASKS or any(m.startswith(_OURS) for m in comp)
    ]
    assert tied == []


def test_tasks_never_import_groups() -> None:
    """A group is made of tasks, not the other way round (tasks/__init__'s rule)."""
    offenders = [
        f"{m}: {n}"
        for m, p in _modules().items()
        if m.startswith("ctrexec.tasks")
        for n in sorted(_imports(p))
        if n == "ctrexec.groups" or n.startswith("ctrexec.groups.")
    ]
    assert offenders == []


@pytest.mark.parametrize("helper", ["stdio", "events", "teardown", "records", "implicitnet"])
def test_task_helpers_take_what_they_use_not_the_executor(helper: str) -> None:
    assert "ctrexec.tasks.executor" not in _imports(PKG / "tasks" / f"{helper}.py")


def test_the_executor_does_not_import_its_asyncio_face() -> None:
    assert not any(n.startswith("ctrexec.tasks.aio") for n in _imports(PKG / "tasks/executor.py"))


def _code_strings(p: Path) -> list[str]:
    """String constants that are not docstrings."""
    tree = ast.parse(p.read_text(), filename=str(p))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_a_groups_namespace_name_is_spelled_in_one_place() -> None:
    """``cx-NAME`` (and with it the group's namespace path) has one owner: net/groupns."""
    spelled = sorted(
        str(p.relative_to(PKG))
        for p in _modules().values()
        if any(s.startswith("cx-") for s in _code_strings(p))
    )
    assert spelled == ["net/groupns.py"]


def _stop_default_spellings(p: Path) -> list[str]:
    """Module-level names for the stop timeout given a number of their own (the
    executor's was ``DEFAULT_KILL_GRACE``)."""
    return [
        f"{p.relative_to(PKG)}: {target.id}"
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, int | float)
        for target in node.targets
        if isinstance(target, ast.Name)
        and ("STOP_TIMEOUT" in target.id or target.id == "DEFAULT_KILL_GRACE")
    ]


def test_the_stop_timeout_has_one_definition() -> None:
    spellings = [s for p in _modules().values() for s in _stop_default_spellings(p)]
    assert spellings == ["defaults.py: DEFAULT_STOP_TIMEOUT"]
    assert TaskConfig(name="t", image="i").stop_timeout == defaults.DEFAULT_STOP_TIMEOUT
    args = build_parser().parse_args(["run", "img"])
    assert args.stop_timeout is defaults.DEFAULT_STOP_TIMEOUT


def test_the_cli_builds_its_executor_in_one_place() -> None:
    """One factory, one log-dir policy: ``cli/_common.executor``."""
    builders = sorted(
        str(p.relative_to(PKG))
        for p in (PKG / "cli").glob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Executor"
    )
    assert builders == ["cli/_common.py"]


def test_the_group_file_format_is_its_own_module() -> None:
    """Reading a group file needs no daemon and no Executor: groups/spec holds it,
    groups/updown (up/down/ps) uses it."""
    found = _imports(PKG / "groups/spec.py")
    assert not any(n.startswith(("ctrexec.containerd", "ctrexec.tasks.executor")) for n in found)
    assert "ctrexec.groups.spec" in _imports(PKG / "groups/updown.py")
