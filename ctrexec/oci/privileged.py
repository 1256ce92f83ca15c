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
from ctrexec.oci.caps import expand_capabilities, set_capabilities

_REMOUNTED_RW = frozenset({"/sys", "/sys/fs/cgroup"})


def with_privileged(*, capabilities: Sequence[str]) -> SpecOpt:
    """Lift the sandbox: ``capabilities``, no seccomp, all devices, /sys writable.

    "All capabilities" should be this process's bounding set: the runtime cannot
    grant more than it holds (see :func:`ctrexec.oci.caps.bounding_capabilities`;
    :func:`ctrexec.tasks.spec.host_bounding_capabilities` reads it). ``["ALL"]`` means
    every one the kernel defines. The caller passes them because this package
    reads no file.
    """
    caps = expand_capabilities(capabilities)

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
