"""The default Linux spec and :func:`build_spec`, the entry point of the builder.

The default is what an unprivileged task gets when nobody asks for more; it is
modelled on what containerd and docker give a container (same mounts, masked
paths and device rules, docker's capability set) plus what they leave to the
caller: a seccomp profile and ``noNewPrivileges``.

Choices worth knowing:

- ``RLIMIT_NOFILE`` is 1024:1024, containerd's default. A larger hard limit
  (systemd's 524288) was tried and refused: raising a hard limit needs
  CAP_SYS_RESOURCE in the runtime, and runtimes run without it in some
  sandboxes (this development VM for one), while lowering always works. Tasks
  that need more ask for it with ``with_rlimits``.
- A ``cgroup`` namespace is included: the task sees its own cgroup as the root
  of ``/sys/fs/cgroup`` on cgroup v2 (docker's v2 default) and no host paths in
  ``/proc/self/cgroup`` on v1. runc supports it on both.
- The network namespace has no path: runc makes a fresh one. Tasks of a group
  are given the group's pinned namespace with ``with_network_namespace(path)``.
- ``cgroupsPath`` is set only when given: an empty path lets the runtime choose,
  and the executor names it after the containerd namespace and container id.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, apply_in_place, mutating
from ctrexec.oci.caps import DEFAULT_CAPABILITIES
from ctrexec.oci.process import DEFAULT_PATH
from ctrexec.oci.resources import check_cgroups_path
from ctrexec.oci.seccomp import load_default_profile

#: The OCI runtime-spec version we write; runc 1.1 and containerd 1.6 accept it.
OCI_VERSION = "1.1.0"

DEFAULT_HOSTNAME = "ctrexec"

DEFAULT_NOFILE_SOFT = 1024
DEFAULT_NOFILE_HARD = 1024

#: /proc and /sys files a task has no business reading (they leak host state or
#: poke the kernel); runc bind-mounts /dev/null or an empty tmpfs over them.
MASKED_PATHS: tuple[str, ...] = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)

#: /proc files that must stay readable but whose writes reach the host kernel.
READONLY_PATHS: tuple[str, ...] = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)

#: Namespaces of an ordinary task, in the order runc joins them.
DEFAULT_NAMESPACES: tuple[str, ...] = ("pid", "ipc", "uts", "mount", "network", "cgroup")


def _mount(
    destination: str, mount_type: str, source: str, options: Sequence[str]
) -> dict[str, Any]:
    return {
        "destination": destination,
        "type": mount_type,
        "source": source,
        "options": list(options),
    }


def default_mounts() -> list[dict[str, Any]]:
    """The standard filesystems every Linux container expects."""
    return [
        _mount("/proc", "proc", "proc", ["nosuid", "noexec", "nodev"]),
        _mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
        _mount(
            "/dev/pts",
            "devpts",
            "devpts",
            ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        ),
        _mount(
            "/dev/shm", "tmpfs", "shm", ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]
        ),
        _mount("/dev/mqueue", "mqueue", "mqueue", ["nosuid", "noexec", "nodev"]),
        _mount("/sys", "sysfs", "sysfs", ["nosuid", "noexec", "nodev", "ro"]),
        _mount(
            "/sys/fs/cgroup", "cgroup", "cgroup", ["nosuid", "noexec", "nodev", "relatime", "ro"]
        ),
    ]


def _char_device_rule(major: int | None, minor: int | None, access: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"allow": True, "type": "c", "access": access}
    if major is not None:
        rule["major"] = major
    if minor is not None:
        rule["minor"] = minor
    return rule


def default_device_rules() -> list[dict[str, Any]]:
    """Deny every device, then allow the few that every program may open.

    ``mknod`` of any device is allowed (the default set has CAP_MKNOD, as in
    docker); opening one that is not listed here still fails.
    """
    return [
        {"allow": False, "access": "rwm"},
        {"allow": True, "type": "c", "access": "m"},
        {"allow": True, "type": "b", "access": "m"},
        _char_device_rule(1, 3, "rwm"),  # /dev/null
        _char_device_rule(1, 5, "rwm"),  # /dev/zero
        _char_device_rule(1, 7, "rwm"),  # /dev/full
        _char_device_rule(1, 8, "rwm"),  # /dev/random
        _char_device_rule(1, 9, "rwm"),  # /dev/urandom
        _char_device_rule(5, 0, "rwm"),  # /dev/tty
        _char_device_rule(5, 2, "rwm"),  # /dev/ptmx
        _char_device_rule(136, None, "rwm"),  # /dev/pts/*
    ]


def default_spec(
    *,
    hostname: str = DEFAULT_HOSTNAME,
    args: Sequence[str] = ("sh",),
    cgroups_path: str | None = None,
    arch: str | None = None,
) -> Spec:
    """A new unprivileged Linux spec; ``arch`` picks the seccomp architectures."""
    caps = list(DEFAULT_CAPABILITIES)
    linux: dict[str, Any] = {
        "namespaces": [{"type": t} for t in DEFAULT_NAMESPACES],
        "maskedPaths": list(MASKED_PATHS),
        "readonlyPaths": list(READONLY_PATHS),
        "resources": {"devices": default_device_rules()},
        "seccomp": load_default_profile(arch=arch, capabilities=caps),
    }
    spec: Spec = {
        "ociVersion": OCI_VERSION,
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": [f"PATH={DEFAULT_PATH}"],
            "cwd": "/",
            "capabilities": {
                "bounding": list(caps),
                "effective": list(caps),
                "permitted": list(caps),
                "inheritable": [],
                "ambient": [],
            },
            "rlimits": [
                {"type": "RLIMIT_NOFILE", "soft": DEFAULT_NOFILE_SOFT, "hard": DEFAULT_NOFILE_HARD}
            ],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": hostname,
        "mounts": default_mounts(),
        "linux": linux,
    }
    if cgroups_path is not None:
        linux["cgroupsPath"] = check_cgroups_path(cgroups_path)
    return spec


def build_spec(*opts: SpecOpt, base: Spec | None = None) -> Spec:
    """Apply ``opts`` in order to ``base`` (default: :func:`default_spec`).

    ``base`` is not modified, so one prepared base can serve many tasks.
    """
    spec = copy.deepcopy(base) if base is not None else default_spec()
    return apply_in_place(spec, opts)


def with_annotations(annotations: Mapping[str, str]) -> SpecOpt:
    """Merge ``annotations`` into the spec (later values win).

    containerd's runc shim reads some of them, notably
    ``io.containerd.runc.v2.group``, which puts a group's tasks in one shim.
    """
    if not isinstance(annotations, Mapping):
        raise InvalidArgument("annotations must be a mapping of string to string")
    checked: dict[str, str] = {}
    for key, value in annotations.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidArgument("annotation keys must be non-empty strings")
        if not isinstance(value, str):
            raise InvalidArgument(f"annotation {key!r} must have a string value")
        checked[key] = value

    def apply(spec: Spec) -> None:
        spec["annotations"] = {**(spec.get("annotations") or {}), **checked}

    return mutating(apply)
