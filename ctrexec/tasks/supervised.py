"""Whether a supervisor serves a namespace, and the problem when a restart waits on none.

A supervisor holds a shared lock on a file named after the containerd address and
namespace while it runs (:func:`ctrexec.groups.presence.presence` takes it); this
module owns where that file is and the probe (:func:`is_supervised`), so ``ps`` and
``inspect`` (this layer) can ask it as cheaply as doctor does.

A container marked "restart pending" whose task is down waits on a supervisor. When
none holds the lock (it was killed, or never started), nothing will restart it:
:func:`annotate` gives such a container the :class:`Problem` that ``ps``, ``inspect``
and ``group ps`` show, and doctor (:mod:`ctrexec.doctor.restarts`) reports the same
words and fix from here: one answer for one problem. The probe (an open and a
non-blocking flock) runs only when a listed container is restarting, once a listing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ctrexec import flocks
from ctrexec.containerd.client import Client
from ctrexec.defaults import DEFAULT_NAMESPACE, RUN_DIR
from ctrexec.tasks.fields import Problem
from ctrexec.tasks.reports import TaskInfo

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

#: Where running supervisors hold their presence locks (cleared by a reboot).
DEFAULT_LOCK_DIR = Path(RUN_DIR, "supervise")
#: The systemd unit that keeps a supervisor running (contrib/systemd).
UNIT = "ctrexec-supervise@{namespace}.service"
#: The problem's words: short, for ``ps``'s STATUS, and naming the fix.
UNSERVED = "no supervisor: run ctrexec supervise"
#: What doctor and ``inspect`` say about it at length.
DETAIL = "a restart is pending, but no supervisor serves this namespace"


def lock_path(client: Client, lock_dir: StrPath = DEFAULT_LOCK_DIR) -> Path:
    """The presence lock of the client's address and namespace."""
    key = hashlib.sha256(os.path.realpath(client.address).encode()).hexdigest()[:16]
    return Path(lock_dir, f"{key}-{client.namespace}.lock")


def is_supervised(client: Client, lock_dir: StrPath = DEFAULT_LOCK_DIR) -> bool:
    """Whether a supervisor (any process) serves the client's address and namespace."""
    return flocks.held(lock_path(client, lock_dir))


def repair(namespace: str, task_id: str) -> str:
    """The fix: a supervisor (by hand or by its unit), or a start of the one container."""
    flag = "" if namespace == DEFAULT_NAMESPACE else f" --namespace {namespace}"
    unit = UNIT.format(namespace=namespace)
    return f"ctrexec supervise{flag} (or systemctl start {unit}); or ctrexec start{flag} {task_id}"


def problem(namespace: str, task_id: str) -> Problem:
    return Problem(UNSERVED, DETAIL, f"run {repair(namespace, task_id)}")


def annotate(
    client: Client, infos: Sequence[TaskInfo], lock_dir: Path = DEFAULT_LOCK_DIR
) -> list[TaskInfo]:
    """The infos, each restarting one given :func:`problem` when no supervisor serves
    the namespace (asked only if some info is restarting: ``ps``'s hot path)."""
    if not any(i.restarting for i in infos) or is_supervised(client, lock_dir):
        return list(infos)
    return [
        attrs.evolve(i, problems=(*i.problems, problem(client.namespace, i.id)))
        if i.restarting
        else i
        for i in infos
    ]
