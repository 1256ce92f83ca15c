"""Empty cgroups under ctrexec's cgroup path that no container has.

runc makes ``/ctrexec/<namespace>/<id>`` (:func:`ctrexec.ids.task_cgroup`) in each
hierarchy and removes the leaf on delete; destroy removes the parents with the last
task. A leaf that outlived both (runc killed, a record deleted outside ctrexec) stays
empty for good. One is garbage when it has no process and no child cgroup in any
hierarchy, no ctrexec record of its namespace and id exists, and its newest mtime is
past the grace period (the kernel gives a cgroup's directory the time it is first
looked at: a first doctor may find it young). An empty ``/ctrexec/<namespace>`` of
a namespace with no ctrexec record goes the same way.

Both cgroup layouts: v1 has one tree per controller (``/sys/fs/cgroup/<controller>``),
v2 one tree at the root (or at ``unified`` in the hybrid layout); every directory
under the root that holds a ``ctrexec`` tree is looked at, as
:func:`ctrexec._linux.remove_empty_cgroups` removes from each. Only the scope's
namespace is looked at (:func:`ctrexec.doctor.files.owned`: another namespace's, or
another containerd's, are their own gc's). Two containerds may share a namespace
name, so a leaf is garbage only when its task's recorded owner
(:func:`ctrexec.owners.task_record`) is this containerd's namespace; a leaf with none
is reported as spared. A namespace's ``/ctrexec/<namespace>`` is left while any
owner record of another containerd names that namespace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ctrexec import _linux, owners
from ctrexec.containerd import containers
from ctrexec.doctor import files
from ctrexec.doctor.findings import Check, Finding, Scope, stamp
from ctrexec.errors import FailedPrecondition, NotFound
from ctrexec.ids import CGROUP_PARENT, task_cgroup, task_of_cgroup

KIND = "cgroup"


def hierarchies(root: Path | None = None) -> list[Path]:
    """Every cgroup tree's top: the root itself (v2) and each directory under it (v1)."""
    base = _linux.CGROUP_ROOT if root is None else root
    with contextlib.suppress(OSError):
        return [base, *sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())]
    return []


def _empty(path: Path) -> bool:
    """No process in it and no child cgroup under it (a vanished one counts as empty)."""
    try:
        if (path / "cgroup.procs").read_text().strip():
            return False
        return not any(p.is_dir() for p in path.iterdir())
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _cgroups(trees: list[Path]) -> dict[str, list[Path]]:
    """Every ``/ctrexec/<ns>`` and ``/ctrexec/<ns>/<id>`` cgroup -> its directories."""
    found: dict[str, list[Path]] = {}
    for tree in trees:
        top = tree / CGROUP_PARENT.lstrip("/")
        with contextlib.suppress(OSError):
            for ns_dir in top.iterdir():
                if not ns_dir.is_dir():
                    continue
                found.setdefault(f"{CGROUP_PARENT}/{ns_dir.name}", []).append(ns_dir)
                for leaf in ns_dir.iterdir():
                    if leaf.is_dir():
                        found.setdefault(task_cgroup(ns_dir.name, leaf.name), []).append(leaf)
    return found


def _newest(paths: list[Path], now: float) -> float | None:
    """The newest mtime of a cgroup's directories, at most ``now``: the kernel stamps a
    cgroup's inode when it is first looked at, which can be a moment after ``now``."""
    times = []
    for p in paths:
        with contextlib.suppress(OSError):
            times.append(min(p.stat().st_mtime, now))
    return max(times) if times else None


def unowned(cgroup: str, namespaces: set[str], owned: set[tuple[str, str]], *, empty: bool) -> bool:
    """Whether an empty cgroup is no container's (the rule, without its age)."""
    if not empty:
        return False
    task = task_of_cgroup(cgroup)
    if task is not None:
        return task[0] in namespaces and task not in owned
    ns = cgroup.removeprefix(f"{CGROUP_PARENT}/")
    return ns in namespaces and all(n != ns for n, _ in owned)


def _why_spared(scope: Scope, cgroup: str) -> str | None:
    """None when the scope's gc may remove ``cgroup``; else why not ("" when the
    reason is another containerd's ownership, which doctor does not list)."""
    task = task_of_cgroup(cgroup)
    if task is not None:
        owner = files.task_owner(scope, *task)
        why = files.judge_owner(scope, owner)
        return why if owner is None or why is None else ""
    ns = cgroup.removeprefix(f"{CGROUP_PARENT}/")
    recorded = owners.task_owners(scope.state_dir, ns)
    if any(files.judge_owner(scope, o) is not None for o in recorded):
        return ""  # shared with another containerd's tasks
    return None


def find(scope: Scope, trees: list[Path] | None = None) -> list[Finding]:
    namespaces, owned = files.owned(scope)
    found = []
    for cgroup, paths in sorted(_cgroups(hierarchies() if trees is None else trees).items()):
        empty = all(_empty(p) for p in paths)
        since = _newest(paths, scope.now)
        if not unowned(cgroup, namespaces, owned, empty=empty) or not scope.old_enough(since):
            continue
        why = _why_spared(scope, cgroup)
        if why == "":
            continue
        finding = Finding(
            kind=KIND,
            where=cgroup,
            what=f"an empty cgroup of no container, in {len(paths)} hierarchies",
            fix="ctrexec gc",
            since=stamp(since),
        )
        found.append(finding if why is None else files.spared(finding, why))
    return found


def remove(scope: Scope, finding: Finding) -> None:
    """rmdir in every hierarchy; the kernel refuses one that is in use again, and the
    parents go only when empty (another task's stay). A leaf whose record exists
    again (a create of that name since doctor looked: runc makes the cgroup after
    the record, before the process enters it) is left alone."""
    task = task_of_cgroup(finding.where)
    if _why_spared(scope, finding.where) is not None:
        raise FailedPrecondition(f"cgroup {finding.where} has another owner now; left alone")
    if task is not None:
        with contextlib.suppress(NotFound):
            containers.get(scope.client.with_namespace(task[0]), task[1])
            raise FailedPrecondition(f"cgroup {finding.where} has a container again")
    if not _linux.remove_empty_cgroups(finding.where.lstrip("/"), parents=True):
        raise FailedPrecondition(f"cgroup {finding.where} is in use again")
    if task is not None:
        files.forget_if_gone(scope, *task)


CHECK = Check(kind=KIND, find=find, remove=remove)
