"""cgroupfs paths that someone else made, as a task's ``cgroup`` field takes them.

A scheduler that places its tasks in cgroups of its own (Nomad's client makes one per
task under its parent) names them by absolute path; ``TaskConfig.cgroup`` is relative
to the cgroup root. The root is :data:`ctrexec._linux.CGROUP_ROOT`'s to say.
"""

from __future__ import annotations

from ctrexec import _linux
from ctrexec.errors import InvalidArgument
from ctrexec.oci import resources


def cgroupfs_relative(path: str) -> str:
    """``path`` (absolute, under the cgroup root) as a path relative to that root, with
    a leading ``/``; InvalidArgument for one that is not normal, has ``..`` or leaves
    the root, before anything is made."""
    checked = resources.check_cgroupfs_path(path)
    root = str(_linux.CGROUP_ROOT)
    if not checked.startswith(root + "/"):
        raise InvalidArgument(f"cgroup path {path!r} is not under {root}")
    return checked[len(root) :]
