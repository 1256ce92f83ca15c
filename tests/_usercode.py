"""What a user's code of ctrexec is held to, for the docs' blocks and examples/: it
imports the public API only, and ``mypy --strict`` checks it against ctrexec as an
install gives it (never the source tree on a path)."""

from __future__ import annotations

import ast
import subprocess
import sys
import sysconfig
from pathlib import Path

import ctrexec


def _allowed(module: str) -> bool:
    """``ctrexec`` itself, not a module under it, or a standard library module."""
    return module == "ctrexec" or module.partition(".")[0] in sys.stdlib_module_names


def private_uses(code: str, name: str) -> list[str]:
    """Each import or ``ctrexec.NAME`` of ``code`` (a file or a block called ``name``)
    that reaches past the public API: a user's program needs nothing but ``ctrexec``
    itself and the standard library."""
    tree = ast.parse(code, name)
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
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


def venv_reading(tmp_path: Path, first: Path) -> Path:
    """A Python whose site-packages has only a ``.pth``: ``first``, then this venv's
    packages for attrs, grpc and protobuf (a path line only: whatever .pth files or
    import hooks are in there are not read)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "deps.pth").write_text(f"{first}\n{sysconfig.get_paths()['purelib']}\n")
    return python
