"""Shims of the scope's containerd that serve no task its API lists.

A client that dies while containerd starts a shim, or inside Tasks.Create (see
:mod:`ctrexec.logs.orphaned_shims`), can leave a shim that containerd has dropped and
never shuts down: no task of the API is served by it, and no call reaches it.

The rule. A shim daemon (found in ``/proc`` by its command line) is looked at when it
was started for the scope's containerd (``-address``) and namespace (``-namespace``):
never another containerd's, nor another namespace's. It is reachable when it listens
on the socket that containerd computes for a listed task (a group's tasks share one:
:func:`ctrexec.containerd.bundles.shim_socket` of the task's runc group annotation,
else its id), or when one of its children is a listed task's process. A shim whose
listening socket cannot be read is not judged. One that is neither reachable nor
younger than the grace period (its process's age) is garbage.

Removal SIGKILLs it, as :func:`~ctrexec.logs.orphaned_shims.stop_orphaned_drivers`
does (its log driver sees its pipes end and exits), then removes its dead socket
file, and its bundle when that is in the runtime's layout for an id containerd lists
no task of (:func:`ctrexec.containerd.bundles.remove`).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from ctrexec import _linux
from ctrexec import labels as lbl
from ctrexec.containerd import bundles, tasks
from ctrexec.doctor.findings import Check, Finding, Scope, stamp
from ctrexec.logs import orphaned_shims

KIND = "shim"
#: How long a killed shim may take to go before its socket file is removed.
EXIT_WAIT = 5.0
_LISTENING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags


def listening_sockets() -> dict[int, Path]:
    """Every listening unix socket under the shims' directory, by inode."""
    found = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and int(fields[3], 16) & _LISTENING:
                path = Path(fields[7])
                if path.parent == bundles.SHIM_SOCKET_DIR:
                    found[int(fields[6])] = path
    return found


def _sockets_of(pid: int, sockets: dict[int, Path]) -> set[Path]:
    held = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = str(fd.readlink())
                if link.startswith("socket:[") and int(link[8:-1]) in sockets:
                    held.add(sockets[int(link[8:-1])])
    return held


def _started(pid: int) -> float | None:
    try:
        return Path(f"/proc/{pid}").stat().st_mtime
    except OSError:
        return None


def _reachable(scope: Scope) -> tuple[set[Path], set[int]]:
    """The sockets of the listed tasks' shims, and the listed tasks' pids."""
    records = {c.id: c for c in scope.records()}
    # With a Get of each record List left out: containerd 2.3 lists no task whose shim
    # is slow, and that shim is not garbage (an UNKNOWN state keeps it reachable).
    listed = list(tasks.states_of(scope.client, records).values())
    address = scope.client.address
    sockets = set()
    for task in listed:
        record = records.get(task.container_id)
        notes = record.spec.get("annotations", {}) if record is not None else {}
        group = notes.get(lbl.SHIM_GROUP_ANNOTATION) or task.container_id
        sockets.add(bundles.shim_socket(address, scope.namespace, group))
    return sockets, {t.pid for t in listed if t.pid}


def _unreachable(scope: Scope) -> list[tuple[int, str, set[Path]]]:
    """(pid, -id, its sockets) of every shim of the scope that the rule calls garbage."""
    procs = scope.shared(orphaned_shims.processes)
    reachable, pids = _reachable(scope)
    listening = listening_sockets()
    address = scope.client.address.encode()
    # Parents of the listed tasks' processes, from the one scan: asking each shim for its
    # children walked the host's process table once per shim.
    serving = {procs[pid][0] for pid in pids if pid in procs}
    found = []
    for pid, (_, argv) in procs.items():
        if not orphaned_shims.is_shim(argv, scope.namespace):
            continue
        if orphaned_shims.arg(argv, b"-address") != address:
            continue
        if pid in serving:
            continue
        own = _sockets_of(pid, listening)
        if not own or own & reachable:
            continue
        if scope.old_enough(_started(pid)):
            found.append((pid, os.fsdecode(orphaned_shims.arg(argv, b"-id") or b"?"), own))
    return found


def find(scope: Scope) -> list[Finding]:
    return [
        Finding(
            kind=KIND,
            where=f"pid {pid}",
            what=f"a shim (started for {task_id}) that serves no task containerd lists",
            fix="ctrexec gc",
            since=stamp(_started(pid)),
            ref=str(pid),
        )
        for pid, task_id, _ in _unreachable(scope)
    ]


def _bundle(pid: int, task_id: str, scope: Scope) -> Path | None:
    """The shim's bundle, when it is in the runtime's layout for this namespace and id."""
    try:
        bundle = Path(f"/proc/{pid}/cwd").readlink()
    except OSError:
        return None
    return bundle if bundle.parts[-3:] == (bundles.PLUGIN_DIR, scope.namespace, task_id) else None


def remove(scope: Scope, finding: Finding) -> None:
    """Kill the shim when it is still garbage (judged again), then what it left."""
    # Judged again on what the daemon and /proc say now, not on the listing find shared.
    scope.forget()
    pid = int(finding.ref)
    for shim, task_id, own in _unreachable(scope):
        if shim != pid:
            continue
        bundle = _bundle(pid, task_id, scope)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        tasks.wait_until(lambda: _started(pid) is None, timeout=EXIT_WAIT)
        for sock in own:
            if not _linux.unix_socket_listening(sock):
                sock.unlink(missing_ok=True)
        if bundle is not None and tasks.find(scope.client, task_id) is None:
            bundles.remove(bundle)


CHECK = Check(kind=KIND, find=find, remove=remove)
