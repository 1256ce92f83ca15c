"""The log and host-file directories of tasks whose records are gone.

ctrexec's destroy removes both before the record (:func:`ctrexec.tasks.files.remove`),
so a directory without a record is what a record deleted outside ctrexec (``ctr c
rm``), or a destroy of an older version, left: ``<log_dir>/<namespace>/<id>`` and
``<state_dir>/netns-files/<namespace>+<id>``. Both paths hold a containerd namespace
and an id, judged against the ctrexec records of that namespace.

Only the scope's namespace is looked at, as for every containerd object: another
namespace's directories are that namespace's gc to judge, and may even be another
containerd's on the same host (a test's private one, the system's) whose records
this daemon cannot see. So a directory is garbage only when its task's recorded
owner (:func:`ctrexec.owners.task_record`, written before the record was made) is
this containerd's namespace; another daemon's are not looked at, and one with no
owner recorded (made before owners were, or a log directory after a reboot) is
reported as spared, never removed. The age is the directory's newest mtime (a log
being written is young); the removal is :func:`ctrexec.tasks.files.remove_orphaned`,
which looks for the record once more first.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from ctrexec import _linux, owners
from ctrexec.doctor import containers as doctor_containers
from ctrexec.doctor.findings import Check, Finding, Scope, stamp
from ctrexec.errors import FailedPrecondition
from ctrexec.ids import is_valid_id, task_cgroup
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles

LOG_KIND = "logdir"
FILES_KIND = "hostfiles"
#: The separator of a task's host-files directory name (see hostfiles.task_dir).
_FILES_SEP = "+"


def _newest_mtime(directory: Path) -> float | None:
    """The newest mtime of a directory and its entries (None once it is gone)."""
    try:
        times = [directory.stat().st_mtime]
        with os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    times.append(entry.stat(follow_symlinks=False).st_mtime)
    except OSError:
        return None
    return max(times)


def owned(scope: Scope) -> tuple[set[str], set[tuple[str, str]]]:
    """The namespaces looked at (the scope's), and each (namespace, id) of a ctrexec
    record there."""
    records = scope.managed()
    return {scope.namespace}, {(scope.namespace, r.id) for r in records}


def _log_dirs(scope: Scope, namespaces: set[str]) -> Iterator[tuple[str, str, Path]]:
    for ns in sorted(namespaces):
        root = scope.log_dir / ns
        with contextlib.suppress(OSError):
            for entry in sorted(root.iterdir()):
                own = is_valid_id(entry.name) and not entry.is_symlink() and entry.is_dir()
                if own and taskfiles.log_path(scope.log_dir, ns, entry.name).parent == entry:
                    yield ns, entry.name, entry


def files_base(scope: Scope) -> Path:
    """Where the scope's tasks' host files are (the Executor's one rule)."""
    return doctor_containers.executor(scope).files_dir


def _files_dirs(scope: Scope, namespaces: set[str]) -> Iterator[tuple[str, str, Path]]:
    base = files_base(scope)
    with contextlib.suppress(OSError):
        for entry in sorted(base.iterdir()):
            ns, sep, task_id = entry.name.partition(_FILES_SEP)
            if not sep or ns not in namespaces or not is_valid_id(task_id):
                continue
            if hostfiles.task_dir(base, ns, task_id).directory == entry and entry.is_dir():
                yield ns, task_id, entry


def task_owner(scope: Scope, ns: str, task_id: str) -> owners.Owner | None:
    """The recorded owner of a task's host objects (log, host files, cgroup)."""
    return owners.read(owners.task_record(scope.state_dir, ns, task_id))


def judge_owner(scope: Scope, owner: owners.Owner | None) -> str | None:
    """None when the scope's gc may remove an object of ``owner``; else why not."""
    return owners.spared(owner, scope.client.address, scope.namespace)


#: The fix of a leftover gc spares (:func:`spared`); gc's report names those.
SPARED_FIX = "nothing: gc spares it; remove it by hand once you know it is no one's"


def spared(finding: Finding, reason: str) -> Finding:
    """A leftover gc leaves alone (no owner recorded), with the reason in its row."""
    return attrs.evolve(finding, what=f"{finding.what}: {reason}", fix=SPARED_FIX, garbage=False)


def is_spared(finding: Finding) -> bool:
    return not finding.garbage and finding.fix == SPARED_FIX


def _finding(scope: Scope, kind: str, ns: str, task_id: str, path: Path) -> Finding | None:
    since = _newest_mtime(path)
    if since is None or not scope.old_enough(since):
        return None
    owner = task_owner(scope, ns, task_id)
    why = judge_owner(scope, owner)
    if owner is not None and why is not None:
        return None  # another containerd's (or namespace's): its own gc judges it
    what = "log" if kind == LOG_KIND else "hosts, resolv.conf and hostname"
    found = Finding(
        kind=kind,
        where=str(path),
        what=f"the {what} directory of container {task_id} ({ns}), which has no record",
        fix="ctrexec gc",
        since=stamp(since),
        ref=f"{ns}/{task_id}",
    )
    return found if why is None else spared(found, why)


def _unowned(
    scope: Scope, kind: str, dirs: Callable[[Scope, set[str]], Iterator[tuple[str, str, Path]]]
) -> list[Finding]:
    namespaces, held = owned(scope)
    found = (
        _finding(scope, kind, ns, i, p)
        for ns, i, p in dirs(scope, namespaces)
        if (ns, i) not in held
    )
    return [f for f in found if f is not None]


def find_logs(scope: Scope) -> list[Finding]:
    return _unowned(scope, LOG_KIND, _log_dirs)


def find_files(scope: Scope) -> list[Finding]:
    return _unowned(scope, FILES_KIND, _files_dirs)


def _remove(scope: Scope, finding: Finding) -> None:
    ns, _, task_id = finding.ref.partition("/")
    if judge_owner(scope, task_owner(scope, ns, task_id)) is not None:
        raise FailedPrecondition(f"{finding.where} has another owner now; left alone")
    executor = doctor_containers.executor(scope)
    logs = [scope.log_dir] if finding.kind == LOG_KIND else []
    bases = [executor.files_dir] if finding.kind == FILES_KIND else []
    taskfiles.remove_orphaned(
        scope.client.with_namespace(ns),
        task_id,
        log_roots=logs,
        files_bases=bases,
        state_dir=executor.state_dir,
    )
    forget_if_gone(scope, ns, task_id)


def forget_if_gone(scope: Scope, ns: str, task_id: str) -> None:
    """The task's owner record goes with the last of its objects gc removes."""
    cgroup = task_cgroup(ns, task_id).lstrip("/")
    with contextlib.suppress(OSError):
        trees = [_linux.CGROUP_ROOT, *_linux.CGROUP_ROOT.iterdir()]
        left = (
            taskfiles.log_path(scope.log_dir, ns, task_id).parent,
            hostfiles.task_dir(files_base(scope), ns, task_id).directory,
            *(tree / cgroup for tree in trees),
        )
        if any(p.exists() for p in left):
            return
        owners.forget(owners.task_record(scope.state_dir, ns, task_id))


LOGS = Check(kind=LOG_KIND, find=find_logs, remove=_remove)
FILES = Check(kind=FILES_KIND, find=find_files, remove=_remove)
