"""A user's ``mypy --strict`` sees ctrexec's lazily exported names with their real types."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ctrexec

ROOT = Path(ctrexec.__file__).parent.parent

# ``wrong`` is wrong on purpose: had the lazy exports made the names ``Any``, mypy would
# accept it, and ``--strict`` would instead flag every Any that leaks into a return.
_USER = textwrap.dedent(
    """\
    from __future__ import annotations
    import ctrexec
    from ctrexec import DEFAULT_NAMESPACE, Client, Executor, NotFound, TaskConfig, TaskHandle

    def start(address: str) -> TaskHandle:
        with Client.connect(address, namespace=DEFAULT_NAMESPACE) as client:
            return Executor(client).start_task(TaskConfig(name="web", image="busybox"))

    def name_of(handle: ctrexec.TaskHandle) -> str:
        return handle.id

    def wrong(config: TaskConfig) -> int:
        return config.name

    def gone(err: Exception) -> bool:
        return isinstance(err, NotFound | ctrexec.ConnectError)
    """
)


def test_mypy_strict_on_a_user_file(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    user = tmp_path / "user.py"
    user.write_text(_USER)
    flags = ["--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *flags, str(user)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    errors = [line.split(":", 1)[1] for line in out.stdout.splitlines() if ": error:" in line]
    line = _USER.splitlines().index("    return config.name") + 1
    assert errors == [
        f'{line}: error: Incompatible return value type (got "str", expected "int")  [return-value]'
    ], out.stdout + out.stderr


def test_type_checking_imports_match_the_lazy_exports() -> None:
    """What type checkers read (the TYPE_CHECKING block) is what ``__getattr__`` loads."""
    tree = ast.parse(Path(ctrexec.__file__).read_text())
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    seen = {
        (a.name, node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for a in node.names
    }
    lazy = {(name, module) for module, names in ctrexec._SOURCES.items() for name in names}
    assert seen == lazy
    unreachable = set(ctrexec.__all__) - set(vars(ctrexec)) - {name for name, _ in lazy}
    assert unreachable == set()
