"""A nearly full disk under a ``--log-driver file`` task's log: damage ahead, not garbage.

Why a warning: in ``file`` mode the runc v2 shim itself appends the task's output to
the log file, and when the disk is full its copy blocks; the task then blocks in its
next write to stdout or stderr (``anon_pipe_write``), still shown running, and stays
blocked after the space is freed (see :mod:`ctrexec.logs.modes`). ``json-file`` drops
and marks instead, so only ``file`` tasks are looked at. One finding per filesystem,
naming its ``file`` tasks; gc removes nothing here: the fix is space, or another mode.
"""

from __future__ import annotations

import os
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.doctor.findings import Check, Finding, Scope, every_record
from ctrexec.logs import modes as logmodes
from ctrexec.tasks.config import config_of

#: Below this share of the filesystem free, a ``file`` task's log disk is nearly full.
NEARLY_FULL = 0.10
KIND = "logdisk"


def _file_mode_logs(scope: Scope) -> dict[int, tuple[Path, list[str]]]:
    """``file`` tasks' log directories by filesystem: ``{st_dev: (a directory, ids)}``."""
    found: dict[int, tuple[Path, list[str]]] = {}
    for _ns, record in every_record(scope):
        config = config_of(record)
        path = record.labels.get(lbl.LOG_PATH, "")
        if config is None or config.log_driver != logmodes.FILE or not path:
            continue
        where = Path(path).parent
        try:
            dev = where.stat().st_dev
        except OSError:
            continue  # no log directory yet (never started), or it went with the task
        found.setdefault(dev, (where, []))[1].append(record.id)
    return found


def find(scope: Scope) -> list[Finding]:
    findings = []
    for where, ids in _file_mode_logs(scope).values():
        try:
            vfs = os.statvfs(where)
        except OSError:
            continue
        total, free = vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize
        if total <= 0 or free >= total * NEARLY_FULL:
            continue
        names = ", ".join(sorted(ids))
        findings.append(
            Finding(
                kind=KIND,
                where=str(where),
                what=(
                    f"log disk {100 * free / total:.0f}% free ({free >> 20} MiB): "
                    f"--log-driver file blocks {names} when it fills"
                ),
                fix=f"free space under {where}, or run them with --log-driver json-file",
                garbage=False,
            )
        )
    return findings


CHECKS = (Check(kind=KIND, find=find),)
