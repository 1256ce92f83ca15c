"""The programs in examples/ are a user's: they import only names ``ctrexec`` exports
(and the standard library), and ``mypy --strict`` accepts them against ctrexec as a
user's mypy finds it, installed (tests/unit/test_public_typing.py says why a ``.pth``).
tests/integration/test_example_scheduler.py runs them.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import ctrexec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _allowed(module: str) -> bool:
    """``ctrexec`` itself, not a module under it, or a standard library module."""
    return module == "ctrexec" or module.partition(".")[0] in sys.stdlib_module_names


def _private_uses(path: Path) -> list[str]:
    """Each import or ``ctrexec.NAME`` of ``path`` that reaches past the public API."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if not _allowed(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if not _allowed(module):
                found.append(f"{where}: from {module} import ...")
            elif module == "ctrexec":
                hidden = [a.name for a in node.names if a.name not in ctrexec.__all__]
                found += [f"{where}: from ctrexec import {name}" for name in hidden]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "ctrexec"
            and node.attr not in ctrexec.__all__
        ):
            found.append(f"{where}: ctrexec.{node.attr}")
    return found


def test_there_are_examples() -> None:
    assert ROOT / "examples" / "scheduler.py" in EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_uses_only_the_public_api(path: Path) -> None:
    assert _private_uses(path) == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import ctrexec\nimport ctrexec.tasks\nfrom ctrexec.net import networks\n"
        "from ctrexec import Executor, _WHERE\nfrom . import x\nimport attrs\n"
        "ctrexec.Executor\nctrexec.tasks\n"
    )
    assert _private_uses(bad) == [
        "bad.py:2: import ctrexec.tasks",
        "bad.py:3: from ctrexec.net import ...",
        "bad.py:4: from ctrexec import _WHERE",
        "bad.py:5: from . import ...",
        "bad.py:6: import attrs",
        "bad.py:8: ctrexec.tasks",
    ]


def test_mypy_strict_accepts_the_examples(tmp_path: Path) -> None:
    """Checked from a directory of their own, with a Python whose only packages are
    this tree (first, in a ``.pth``) and this venv's: ctrexec is read as installed,
    and its own modules' errors are not the examples'."""
    pytest.importorskip("mypy")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "deps.pth").write_text(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    work = tmp_path / "user"
    work.mkdir()
    for path in EXAMPLES:
        shutil.copy(path, work / path.name)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), "--python-executable", str(python),
         *(p.name for p in EXAMPLES)],
        check=False, capture_output=True, text=True, cwd=work, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
