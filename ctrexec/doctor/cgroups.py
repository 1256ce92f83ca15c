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
another containerd's, are their own gc's).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ctrexec import _linux
from ctrexec.doctor.files import owned as owned_ids
from ctrexec.doctor.findings import Check, Finding, Scope, stamp
from ctrexec.errors import FailedPrecondition
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


def find(scope: Scope, trees: list[Path] | None = None) -> list[Finding]:
    namespaces, owned = owned_ids(scope)
    found = []
    for cgroup, paths in sorted(_cgroups(hierarchies() if trees is None else trees).items()):
        empty = all(_empty(p) for p in paths)
        since = _newest(paths, scope.now)
        if unowned(cgroup, namespaces, owned, empty=empty) and scope.old_enough(since):
            found.append(
                Finding(
                    kind=KIND,
                    where=cgroup,
                    what=f"an empty cgroup of no container, in {len(paths)} hierarchies",
                    fix="ctrexec gc",
                    since=stamp(since),
                )
            )
    return found


def remove(scope: Scope, finding: Finding) -> None:
    """rmdir in every hierarchy; the kernel refuses one that is in use again, and the
    parents go only when empty (another task's stay)."""
    if not _linux.remove_empty_cgroups(finding.where.lstrip("/"), parents=True):
        raise FailedPrecondition(f"cgroup {finding.where} is in use again")


CHECK = Check(kind=KIND, find=find, remove=remove)
