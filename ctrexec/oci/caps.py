"""Linux capabilities: docker's default set, the full list, and options.

Capability names are accepted as ``NET_ADMIN`` or ``CAP_NET_ADMIN`` in any case,
and ``ALL``; they are stored in the spec as ``CAP_*``, the form runc expects.
Unknown names are refused: a typo must not silently grant or keep a privilege.

Only the bounding, effective and permitted sets are filled. The inheritable and
ambient sets stay empty, as docker has done since CVE-2022-24769: a non-root
process in the container gets no capabilities unless it execs a file that
carries them.

The default seccomp profile allows some syscalls only with a capability (for
example ``ptrace`` with ``CAP_SYS_PTRACE``). The options here keep a default
profile in step with the capability set, like docker; a custom profile, or none,
is left exactly as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, mutating, process_of
from ctrexec.oci.seccomp import refresh_default_seccomp

#: Every capability the kernel defines, in bit order (0..40, Linux 5.9+).
ALL_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)

#: Docker's default set: what ordinary images expect root to be able to do
#: (chown files, bind low ports, switch users, use raw sockets for ping)
#: without reaching the host.
DEFAULT_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)

#: The capability sets we manage; inheritable and ambient are kept empty.
CAPABILITY_SETS: tuple[str, ...] = ("bounding", "effective", "permitted")

_KNOWN = frozenset(ALL_CAPABILITIES)


def normalize_capability(name: str) -> str:
    """Return ``name`` as ``CAP_X``; raise :class:`InvalidArgument` if unknown.

    ``ALL`` is returned as ``ALL`` for the callers that accept it.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument("capability name must be a non-empty string")
    upper = name.strip().upper()
    if upper in {"ALL", "CAP_ALL"}:
        return "ALL"
    full = upper if upper.startswith("CAP_") else f"CAP_{upper}"
    if full not in _KNOWN:
        raise InvalidArgument(f"unknown capability {name!r}")
    return full


def expand_capabilities(names: Iterable[str]) -> list[str]:
    """Normalise ``names``, expanding ``ALL``, without duplicates, in kernel order."""
    if isinstance(names, str):
        raise InvalidArgument("capabilities must be a list of names, not one string")
    wanted: set[str] = set()
    for name in names:
        norm = normalize_capability(name)
        wanted.update(ALL_CAPABILITIES if norm == "ALL" else (norm,))
    return [cap for cap in ALL_CAPABILITIES if cap in wanted]


def current_capabilities(spec: Spec) -> list[str]:
    """The bounding set of ``spec`` (what the other options treat as "the" set)."""
    caps: dict[str, Any] = process_of(spec).get("capabilities") or {}
    return list(caps.get("bounding") or [])


def set_capabilities(spec: Spec, caps: Iterable[str]) -> None:
    """Write ``caps`` to the managed sets of ``spec`` in place (for sibling modules).

    Inheritable and ambient are emptied; the default seccomp profile, if that is
    what the spec carries, is regenerated for the new set.
    """
    old = current_capabilities(spec)
    new = [cap for cap in ALL_CAPABILITIES if cap in set(caps)]
    process_of(spec)["capabilities"] = {
        "bounding": list(new),
        "effective": list(new),
        "permitted": list(new),
        "inheritable": [],
        "ambient": [],
    }
    refresh_default_seccomp(spec, old_caps=old, new_caps=new)


def with_capabilities(caps: Iterable[str]) -> SpecOpt:
    """Set exactly ``caps`` (``ALL`` allowed), replacing whatever was there."""
    wanted = expand_capabilities(caps)

    def apply(spec: Spec) -> None:
        set_capabilities(spec, wanted)

    return mutating(apply)


def with_added_capabilities(caps: Iterable[str]) -> SpecOpt:
    """Add ``caps`` to the current set, like ``docker run --cap-add``."""
    added = expand_capabilities(caps)

    def apply(spec: Spec) -> None:
        set_capabilities(spec, set(current_capabilities(spec)) | set(added))

    return mutating(apply)


def with_dropped_capabilities(caps: Iterable[str]) -> SpecOpt:
    """Remove ``caps`` from the current set, like ``docker run --cap-drop``.

    Options apply in order, so ``drop ALL`` followed by ``add X`` leaves only X,
    which is how docker reads ``--cap-drop ALL --cap-add X``.
    """
    dropped = set(expand_capabilities(caps))

    def apply(spec: Spec) -> None:
        set_capabilities(spec, [c for c in current_capabilities(spec) if c not in dropped])

    return mutating(apply)


def capabilities_from_mask(mask: int) -> list[str]:
    """The capability names whose bits are set in ``mask`` (as in /proc status)."""
    return [cap for bit, cap in enumerate(ALL_CAPABILITIES) if mask >> bit & 1]


def bounding_capabilities(status_text: str) -> list[str]:
    """Capabilities in a process's bounding set, from the text of its ``/proc/<pid>/status``.

    A runtime cannot grant a capability it does not hold itself: runc fails with
    "unable to apply caps" when asked to. Sandboxed hosts (this development VM
    lacks CAP_SYS_RESOURCE, for one) hold fewer than the kernel knows, so
    "every capability" must mean every capability we have, which is also what
    docker's ``--privileged`` grants. The caller reads the file
    (:func:`ctrexec.tasks.spec.host_bounding_capabilities`): this package reads none.
    """
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == "CapBnd":
            return capabilities_from_mask(int(value.strip(), 16))
    raise InvalidArgument("no CapBnd line in the process status")
