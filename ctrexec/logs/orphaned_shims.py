"""Shims that a cancelled Tasks.Create left serving nothing but a task's log driver.

containerd has dropped such a shim and never shuts it down, so nothing but this module
stops it (:func:`stop_orphaned_drivers` says when that happens). The processes are
found in ``/proc`` by their command lines: a driver's names its log (in the forms
:func:`ctrexec.logs.driver.parse_args` takes), a shim's its namespace and id. Destroy
and the next start of the id (:mod:`ctrexec.tasks.stale`) call it.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from ctrexec import procfs
from ctrexec.logs.driver import DRIVER_NAME

_SHIM_PREFIX = "containerd-shim"
#: How long destroy waits, at most, for a cancelled Tasks.Create to finish failing.
ORPHAN_SETTLE = 5.0
#: How long a shim must stay with nothing but our driver before it counts as orphaned.
ORPHAN_STABLE = 1.0


def processes() -> dict[int, tuple[int, list[bytes]]]:
    """Every process as pid -> (parent pid, argv); kernel threads and the vanished skipped.

    Plain ``open`` rather than ``pathlib``: this runs at every task's delete, over the
    host's every process, and costs a third of pathlib's time.
    """
    found = {}
    for name in os.listdir("/proc"):  # noqa: PTH208
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:  # noqa: PTH123
                argv = cmdline.read().split(b"\0")[:-1]
            if not argv:
                continue
            stat = procfs.proc_stat(name)
            if stat is None:
                continue
            parent = int(stat[1][1])
        except (OSError, IndexError, ValueError):
            continue
        found[int(name)] = (parent, argv)
    return found


def arg(argv: list[bytes], flag: bytes) -> bytes | None:
    return next((v for k, v in itertools.pairwise(argv) if k == flag), None)


def _driver_paths(argv: list[bytes]) -> set[bytes]:
    """The logs a command line is a log driver's for (see parse_args' forms); none for
    any other command."""
    if not any(DRIVER_NAME.encode() in a for a in argv[:3]):
        return set()
    paths = {v for k, v in itertools.pairwise(argv) if k.lstrip(b"-") == b"path"}
    return paths | {a.removeprefix(b"--path=") for a in argv if a.startswith(b"--path=")}


def is_shim(argv: list[bytes], namespace: str) -> bool:
    """A shim daemon of ``namespace`` (not containerd's ``start`` or ``delete`` runs)."""
    name = Path(os.fsdecode(argv[0])).name
    return (
        name.startswith(_SHIM_PREFIX)
        and argv[-1] not in (b"start", b"delete")
        and arg(argv, b"-namespace") == namespace.encode()
    )


def stop_orphaned_drivers(
    log_path: str | os.PathLike[str],
    namespace: str,
    container_id: str,
    *,
    settle: float = ORPHAN_SETTLE,
    stable: float = ORPHAN_STABLE,
) -> list[int]:
    """Stop a shim left serving nothing but this task's log driver; return pids signalled
    (:func:`stop_orphaned_drivers_of` of this one task)."""
    return stop_orphaned_drivers_of(
        [(log_path, container_id)], namespace, settle=settle, stable=stable
    )


def stop_orphaned_drivers_of(
    tasks: Sequence[tuple[str | os.PathLike[str], str]],
    namespace: str,
    *,
    settle: float = ORPHAN_SETTLE,
    stable: float = ORPHAN_STABLE,
) -> list[int]:
    """Stop the shims left serving nothing but these tasks' log drivers (each a log
    path and a container id); return pids signalled.

    Why (containerd 1.6): when ``runc create`` fails after the shim has started the
    ``binary://`` driver, as it does when the client dies inside Tasks.Create and
    containerd cancels the call, the shim never closes the driver's pipes
    (``pkg/process`` ``Init.Create`` drops its I/O unclosed), and containerd, having
    dropped the task and disconnected from that shim, never shuts it down. Both then
    live on with nothing to serve, out of reach of containerd's API. A client that
    dies while containerd starts the shim can likewise leave a shim with no task.
    Call this once containerd has no task for ``container_id``.

    The shims looked at are ours: the driver's parent, or the daemon started for this
    id. One whose children are all this log's drivers, or that has none, is SIGKILLed
    once it has stayed so for ``stable`` seconds (a shim deleting normally passes
    through that state for milliseconds; an orphan stays); its driver then sees its
    pipes end and exits. While ``runc`` still works for this id under it (a ``runc
    init`` left by the cancelled create lingers until containerd's own cleanup kills
    it, ~20 s here), it is waited for until ``settle`` runs out, then SIGKILLed all
    the same: containerd never shuts it down. A shim that runs anything else (a
    group's other tasks) is left alone. With no shim of ours, it returns at once.

    The tasks of a removal of many are looked at together, all in one scan of the
    host's processes at a time: a scan costs every process on the host, which grows
    with the number of tasks. A shim serving only the drivers of tasks removed is
    theirs, as one serving only one task's driver is that task's.
    """
    logs = {os.fsencode(os.fspath(path)) for path, _ in tasks}
    ids = {container_id.encode() for _, container_id in tasks}
    if not ids:
        return []
    deadline = time.monotonic() + settle
    first_seen: dict[int, float] = {}
    signalled: list[int] = []
    while True:
        procs, now = processes(), time.monotonic()
        busy = False
        for shim, children in _our_shims(procs, logs, namespace, ids).items():
            kinds = {_child_kind(procs[c][1], logs, ids) for c in children}
            if "other" in kinds:
                first_seen.pop(shim, None)  # it serves something else: not ours to stop
                continue
            seen_before = shim in first_seen
            since = first_seen.setdefault(shim, now)
            if "runc" in kinds:
                first_seen[shim] = now  # runc still at work: not idle yet
            if (kinds <= {"driver"} and now - since >= stable) or (seen_before and now > deadline):
                signalled += _signal(shim, signal.SIGKILL)
            else:
                busy = True
        if not busy or now > deadline + stable:
            return signalled
        time.sleep(0.05)


def _child_kind(argv: list[bytes], logs: set[bytes], ids: set[bytes]) -> str:
    """A shim's child: one of these logs' ``driver``, ``runc`` at work for one of these
    ids, or ``other``."""
    if _driver_paths(argv) & logs:
        return "driver"
    runc = Path(os.fsdecode(argv[0])).name == "runc"
    if runc and (argv[-1] in ids or argv[1:] == [b"init"]):
        return "runc"
    return "other"


def _our_shims(
    procs: dict[int, tuple[int, list[bytes]]], logs: set[bytes], namespace: str, ids: set[bytes]
) -> dict[int, set[int]]:
    """Shim daemons of these tasks (parent of a driver of theirs, or started for one of
    their ids) -> children."""
    parents = {parent for parent, argv in procs.values() if _driver_paths(argv) & logs}
    shims = {
        pid
        for pid, (_, argv) in procs.items()
        if is_shim(argv, namespace) and (pid in parents or arg(argv, b"-id") in ids)
    }
    children: dict[int, set[int]] = {shim: set() for shim in shims}
    for pid, (parent, _) in procs.items():
        if parent in children:
            children[parent].add(pid)
    return children


def _signal(pid: int, sig: int) -> list[int]:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return []
    return [pid]
