"""The layering rules from docs/architecture.md, enforced on the source text."""

from __future__ import annotations

import ast
from pathlib import Path

import ctrexec

PKG = Path(ctrexec.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _hand_written() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if "_api" not in p.relative_to(PKG).parts]


def test_only_rpc_imports_grpc() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in _hand_written()
        if p.name != "_rpc.py"
        and any(
            m == "grpc" or m.startswith("grpc.") or m.endswith("_pb2_grpc") for m in _imports(p)
        )
    ]
    assert offenders == []


def test_cli_uses_no_private_layers() -> None:
    offenders = []
    for p in (PKG / "cli").glob("*.py"):
        for m in _imports(p):
            if m.startswith(("ctrexec._rpc", "ctrexec._api")):
                offenders.append(f"{p.name}: {m}")
    assert offenders == []


def test_public_api_is_exported() -> None:
    assert ctrexec.__all__, "ctrexec.__all__ must list the public API"
    missing = [name for name in ctrexec.__all__ if not hasattr(ctrexec, name)]
    assert missing == []
    assert len(set(ctrexec.__all__)) == len(ctrexec.__all__)


def test_modules_stay_small() -> None:
    big = [
        f"{p.relative_to(PKG)}: {n}"
        for p in _hand_written()
        if (n := len(p.read_text().splitlines())) > 650
    ]
    assert big == []
