"""What :func:`ctrexec.preload` leaves loaded for a forking parent's children."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
if sys.argv[1] == "preload":
    from ctrexec import preload
    preload()
else:
    import ctrexec.preloading
print("pyroute2.iproute.linux" in sys.modules)
"""


def _netlink_loaded(mode: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "True"


def test_preload_loads_netlink_that_an_inspect_of_a_running_task_reads() -> None:
    """A fresh interpreter each, as pyroute2 may be loaded in this one: importing the
    module list loads no netlink; the preload does, so a fork's ``inspect`` need not."""
    assert not _netlink_loaded("import")
    assert _netlink_loaded("preload")
