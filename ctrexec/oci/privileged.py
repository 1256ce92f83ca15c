"""``with_privileged``: docker's ``--privileged``, as an explicit opt-in only.

A privileged task can do anything root on the host can: every capability we
hold, no seccomp filter, no masked or read-only /proc paths, /sys and its cgroup
tree writable, and every device allowed by the cgroup. Nothing in ctrexec turns
this on implicitly.

Two differences from docker, both on purpose:

- host device nodes are not copied into the container's /dev (that would make
  this option read the host); the cgroup allows them all, so add the ones you
  need with :func:`ctrexec.oci.with_devices` or a bind mount;
- ``noNewPrivileges`` is left as it is (true by default); turn it off with
  :func:`ctrexec.oci.with_no_new_privileges` if the task runs setuid programs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctrexec.oci._base import Spec, SpecOpt, linux_of, mutating, resources_of
from ctrexec.oci.caps import bounding_capabilities, expand_capabilities, set_capabilities

_REMOUNTED_RW = frozenset({"/sys", "/sys/fs/cgroup"})


def with_privileged(*, capabilities: Sequence[str] | None = None) -> SpecOpt:
    """Lift the sandbox: all capabilities, no seccomp, all devices, /sys writable.

    "All capabilities" defaults to this process's bounding set, read when the
    option is made: the runtime cannot grant more than it holds (see
    :func:`ctrexec.oci.caps.bounding_capabilities`). Pass ``capabilities`` to
    choose them yourself (``["ALL"]`` for every one the kernel defines).
    """
    caps = expand_capabilities(
        capabilities if capabilities is not None else bounding_capabilities()
    )

    def apply(spec: Spec) -> None:
        linux = linux_of(spec)
        linux.pop("seccomp", None)
        set_capabilities(spec, caps)
        linux["maskedPaths"] = []
        linux["readonlyPaths"] = []
        resources_of(spec)["devices"] = [{"allow": True, "access": "rwm"}]
        for mount in spec.get("mounts") or []:
            if mount.get("destination") in _REMOUNTED_RW:
                mount["options"] = [o for o in mount.get("options") or [] if o != "ro"]

    return mutating(apply)
