"""Reading and cleaning the kernel mount table.

Used by the embedded daemon's cleanup and by leak audits: both need to know what is
mounted under a directory and to detach it without following anything outside.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from pathlib import Path

MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit() and i + 3 < len(field):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo: str | None = None) -> list[str]:
    """Every mount point, in mount order (parents before children)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(_unescape(fields[4]))
    return points


def mounts_under(directory: Path | str, mountinfo: str | None = None) -> list[str]:
    """Mount points at or below ``directory``."""
    base = os.path.normpath(str(directory))
    return [p for p in mount_points(mountinfo) if p == base or p.startswith(base.rstrip("/") + "/")]


def unmount(path: str) -> None:
    """Lazily detach one mount point; a path that is no longer mounted is fine."""
    if _libc.umount2(os.fsencode(path), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            raise OSError(err, os.strerror(err), path)


def unmount_all(points: list[str]) -> None:
    """Detach mounts children first, ignoring ones already gone."""
    for p in sorted(set(points), key=len, reverse=True):
        with contextlib.suppress(OSError):
            unmount(p)
