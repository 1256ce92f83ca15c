"""The programs in examples/ are a user's: they import only names ``ctrexec`` exports
(and the standard library), and ``mypy --strict`` accepts them against ctrexec as a
user's mypy finds it, installed (tests/unit/test_public_typing.py says why a ``.pth``).
tests/integration/test_example_scheduler.py runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _usercode import private_uses, venv_reading

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples() -> None:
    assert ROOT / "examples" / "scheduler.py" in EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_uses_only_the_public_api(path: Path) -> None:
    assert private_uses(path.read_text(), path.name) == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import ctrexec\nimport ctrexec.tasks\nfrom ctrexec.net import networks\n"
        "from ctrexec import Executor, _WHERE\nfrom . import x\nimport attrs\n"
        "ctrexec.Executor\nctrexec.tasks\n"
    )
    assert private_uses(bad.read_text(), bad.name) == [
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
    python = venv_reading(tmp_path, ROOT)
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
