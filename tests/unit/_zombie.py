"""A child that exited and is not reaped yet, for the tests of what a zombie is not."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ctrexec.testing import wait_for


@contextlib.contextmanager
def zombie() -> Iterator[int]:
    """Its pid while its /proc/PID/stat says Z (read here, not with the parser under
    test); reaped on leaving, so the pid then names no process."""
    proc = subprocess.Popen(["true"])
    try:
        wait_for(lambda: _state(proc.pid) == "Z", timeout=30, what="the child to exit")
        yield proc.pid
    finally:
        proc.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
