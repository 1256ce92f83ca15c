"""The log daemon's small writes: its registration files, its pid file, its ready byte.

Apart from :mod:`ctrexec.logs.daemon` only to keep that module within its size; the
same cost rule holds (the standard library's cheap modules only: the daemon's start
and memory are a share of every task's).
"""

# ruff: noqa: PTH103, PTH105, PTH120, PTH123, SIM105

from __future__ import annotations

import json
import os


def write_json(path: str, data: dict[str, object]) -> None:
    """Write ``path`` whole or not at all (a daemon killed midway leaves the old one)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def write_pid(path: str) -> None:
    """Record this process's pid in ``path`` (replaced whole: a reader never sees half)."""
    with open(path + ".tmp", "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(path + ".tmp", path)


def tell(fd: int, byte: bytes) -> None:
    """Send the starting client its one ready byte and close the pipe (none: ``fd`` < 0)."""
    if fd < 0:
        return
    try:
        os.write(fd, byte)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass
