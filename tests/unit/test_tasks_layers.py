"""tasks/ and groups/: no import cycle, helpers that take what they use, one owner per fact.

Imports are counted wherever they stand: inside functions and under ``TYPE_CHECKING``
too, since either ties the modules together as much as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import _graph
import pytest

from ctrexec import defaults
from ctrexec.cli.main import build_parser
from ctrexec.tasks.config import TaskConfig

pytestmark = pytest.mark.unit

PKG = _graph.PKG


def _deps(module: str) -> set[str]:
    return _graph.graph()[module]


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
        for comp in map(set, _graph.cycles(_graph.graph()))
        if comp & _OURS_IN_TASKS or any(m.startswith(_OURS) for m in comp)
    ]
    assert tied == []


def test_tasks_never_import_groups() -> None:
    """A group is made of tasks, not the other way round (tasks/__init__'s rule)."""
    offenders = [
        f"{m}: {n}"
        for m, deps in _graph.graph().items()
        if m.startswith("ctrexec.tasks")
        for n in sorted(deps)
        if n == "ctrexec.groups" or n.startswith("ctrexec.groups.")
    ]
    assert offenders == []


@pytest.mark.parametrize("helper", ["stdio", "events", "teardown", "records", "implicitnet"])
def test_task_helpers_take_what_they_use_not_the_executor(helper: str) -> None:
    assert "ctrexec.tasks.executor" not in _deps(f"ctrexec.tasks.{helper}")


def test_the_executor_does_not_import_its_asyncio_face() -> None:
    assert "ctrexec.tasks.aio" not in _deps("ctrexec.tasks.executor")


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
    """``cx-`` has one owner: net/holders, below net/networks, which scans the group
    namespaces before each ADD; net/groupns makes the names and paths from it."""
    spelled = sorted(
        str(p.relative_to(PKG))
        for p in _graph.hand_written().values()
        if any(s.startswith("cx-") for s in _code_strings(p))
    )
    assert spelled == ["net/holders.py"]


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
    spellings = [s for p in _graph.hand_written().values() for s in _stop_default_spellings(p)]
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
    found = _deps("ctrexec.groups.spec")
    assert not any(n.startswith(("ctrexec.containerd", "ctrexec.tasks.executor")) for n in found)
    assert "ctrexec.groups.spec" in _deps("ctrexec.groups.updown")
