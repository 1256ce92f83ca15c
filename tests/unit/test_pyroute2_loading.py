"""ctrexec loads pyroute2's IPRoute alone, and leaves pyroute2 whole for everyone else."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent(
    """
    import json, sys
    first = sys.argv[1] == "pyroute2-first"
    if first:
        import pyroute2
    import ctrexec.tasks.executor, ctrexec.net.networks, ctrexec.net.nsrefs
    at_import = sorted(m for m in sys.modules if m.startswith("pyroute2"))
    from ctrexec.net import _pyroute2
    ip_route, netlink_error = _pyroute2.load()
    machinery = sorted(m for m in sys.modules if m.startswith(("pyroute2.ndb", "pyroute2.ipdb")))
    import pyroute2
    from pyroute2 import IPDB
    print(json.dumps({
        "at_import": at_import if not first else [],
        "machinery": machinery,
        "same": [ip_route is pyroute2.IPRoute, netlink_error is pyroute2.NetlinkError],
        "whole_later": [pyroute2.NDB.__name__, IPDB.__name__, pyroute2.__version__ != ""],
    }))
    """
)


def _probe(mode: str) -> dict[str, list[object]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    got: dict[str, list[object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def test_importing_ctrexec_loads_no_pyroute2_and_netlink_loads_no_ndb() -> None:
    got = _probe("ctrexec-first")
    assert got["at_import"] == []
    assert got["machinery"] == []
    assert got["same"] == [True, True]
    assert got["whole_later"] == ["NDB", "IPDB", True]


def test_a_program_that_imported_pyroute2_first_keeps_it() -> None:
    got = _probe("pyroute2-first")
    assert got["machinery"] != []  # pyroute2's own __init__ loaded them, as before
    assert got["same"] == [True, True]
    assert got["whole_later"] == ["NDB", "IPDB", True]


def test_only_the_loader_imports_pyroute2() -> None:
    """Elsewhere an ``import pyroute2...`` would run its whole ``__init__`` again."""
    import ast
    from pathlib import Path

    import ctrexec

    pkg = Path(ctrexec.__file__).parent
    offenders = []
    for path in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "pyroute2" for n in names):
                offenders.append(str(path.relative_to(pkg)))
    assert offenders == []  # _pyroute2 goes through importlib, by name
