"""Which processes hold a file open: the log daemon's check before it reads a FIFO again.

Why: a daemon whose state directory was wiped under it (``/run`` emptied) keeps reading
its FIFOs without a socket; a new daemon that read them too would split their lines
between two logs' writers. Only a recovery asks (:mod:`ctrexec.logs.client` ``recover``),
so scanning ``/proc`` is affordable. Standard library only: the daemon imports it.
"""

# The daemon's cheap imports (see ctrexec.logs.daemon): os.path over pathlib.
# ruff: noqa: PTH115, PTH123, PTH208

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # typing costs the daemon's start; see ctrexec.logs.driver
if TYPE_CHECKING:
    from collections.abc import Sequence


def is_fifo(path: str) -> bool:
    """Whether ``path`` is a FIFO (not following a link)."""
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except OSError:
        return False


def held_by(name: str, paths: Sequence[str]) -> bool:
    """Whether another process whose command line has the argument ``name`` holds one
    of ``paths`` open (read from ``/proc/<pid>/fd``; a process that ends meanwhile is
    passed over)."""
    return bool(held(name, paths))


def held(name: str, paths: Sequence[str]) -> set[str]:
    """Those of ``paths`` that another process named ``name`` (see :func:`held_by`)
    holds open; one pass over ``/proc`` for them all."""
    wanted, found = set(paths), set[str]()
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != me]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if name.encode() not in f.read().split(b"\0"):
                    continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                found.add(target)
    return found
