"""Linux namespaces, hostname and sysctls.

A namespace option replaces the entry of the same type instead of appending one,
so applying it twice is harmless and the last word wins. This matters for the
network namespace, which ctrexec hands to every task of a group by path
(``/run/netns/<name>``): a second, pathless entry would silently give the task a
fresh, empty namespace.

Sysctls are limited to ``net.*``: those are namespaced per network namespace, so
setting one cannot change the host, unless the task shares the host's network,
in which case they are refused too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, check_container_path, linux_of, mutating

#: Namespace types the OCI runtime spec defines.
NAMESPACE_TYPES = frozenset({"pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time"})

# RFC 1123 labels; the kernel allows 64 bytes for a hostname.
_HOSTNAME_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_SYSCTL_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_type(ns_type: str) -> None:
    if ns_type not in NAMESPACE_TYPES:
        raise InvalidArgument(
            f"unknown namespace type {ns_type!r} (expected one of {sorted(NAMESPACE_TYPES)})"
        )


def namespaces_of(spec: Spec) -> list[dict[str, Any]]:
    """The ``linux.namespaces`` list of ``spec``, created if missing."""
    namespaces: list[dict[str, Any]] = linux_of(spec).setdefault("namespaces", [])
    return namespaces


def find_namespace(spec: Spec, ns_type: str) -> dict[str, Any] | None:
    """The namespace entry of ``ns_type`` in ``spec``, or None (the host's is shared)."""
    for entry in spec.get("linux", {}).get("namespaces", []):
        if entry.get("type") == ns_type:
            return dict(entry)
    return None


def with_namespace(ns_type: str, path: str | None = None) -> SpecOpt:
    """Give the task its own ``ns_type`` namespace: a new one, or the one at ``path``.

    Replaces any entry of the same type, keeping its position in the list.
    """
    _check_type(ns_type)
    entry: dict[str, Any] = {"type": ns_type}
    if path is not None:
        entry["path"] = check_container_path(path, f"{ns_type} namespace path")

    def apply(spec: Spec) -> None:
        namespaces = namespaces_of(spec)
        for index, existing in enumerate(namespaces):
            if existing.get("type") == ns_type:
                namespaces[index] = dict(entry)
                # Drop any duplicates a hand-written spec may have carried.
                namespaces[index + 1 :] = [
                    n for n in namespaces[index + 1 :] if n.get("type") != ns_type
                ]
                return
        namespaces.append(dict(entry))

    return mutating(apply)


def with_host_namespace(ns_type: str) -> SpecOpt:
    """Share the host's ``ns_type`` namespace by removing the entry (explicit opt-in)."""
    _check_type(ns_type)

    def apply(spec: Spec) -> None:
        if ns_type == "network":
            _refuse_net_sysctls_on_host(spec.get("linux", {}).get("sysctl") or {})
        if ns_type == "uts" and spec.get("hostname"):
            # runc refuses a hostname without a private UTS namespace; so do we,
            # but with the reason.
            raise InvalidArgument("cannot share the host's UTS namespace and set a hostname")
        linux = linux_of(spec)
        linux["namespaces"] = [n for n in namespaces_of(spec) if n.get("type") != ns_type]

    return mutating(apply)


def with_network_namespace(path: str) -> SpecOpt:
    """Join the network namespace pinned at ``path`` (for example ``/run/netns/x``)."""
    return with_namespace("network", path)


def with_host_network() -> SpecOpt:
    """Share the host's network namespace. Refused if ``net.*`` sysctls are set."""
    return with_host_namespace("network")


def with_hostname(hostname: str) -> SpecOpt:
    """Set the hostname the task sees in its own UTS namespace."""
    if not isinstance(hostname, str) or not hostname or len(hostname) > 64:
        raise InvalidArgument("hostname must be 1 to 64 characters")
    if not all(_HOSTNAME_LABEL.match(label) for label in hostname.split(".")):
        raise InvalidArgument(f"invalid hostname {hostname!r} (RFC 1123 labels expected)")

    def apply(spec: Spec) -> None:
        if find_namespace(spec, "uts") is None:
            raise InvalidArgument("cannot set a hostname while sharing the host's UTS namespace")
        spec["hostname"] = hostname

    return mutating(apply)


def check_sysctl_key(key: str) -> None:
    """Allow only well-formed ``net.*`` keys: those are per network namespace."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument("sysctl key must be a non-empty string")
    if "/" in key or ".." in key:
        raise InvalidArgument(f"sysctl key {key!r} must not contain '/' or '..'")
    segments = key.split(".")
    if not all(_SYSCTL_SEGMENT.match(s) for s in segments):
        raise InvalidArgument(f"invalid sysctl key {key!r}")
    if segments[0] != "net" or len(segments) < 2:
        raise InvalidArgument(
            f"sysctl {key!r} is not namespaced; only net.* sysctls can be set for a task"
        )


def _refuse_net_sysctls_on_host(sysctls: Mapping[str, str]) -> None:
    for key in sysctls:
        if key.startswith("net."):
            raise InvalidArgument(
                f"sysctl {key!r} would change the host: the task shares the host's network"
            )


def with_sysctls(sysctls: Mapping[str, str]) -> SpecOpt:
    """Set namespaced ``net.*`` sysctls, merged over any already in the spec."""
    if not isinstance(sysctls, Mapping):
        raise InvalidArgument("sysctls must be a mapping of key to value")
    checked: dict[str, str] = {}
    for key, value in sysctls.items():
        check_sysctl_key(key)
        if not isinstance(value, str) or "\n" in value or "\x00" in value:
            raise InvalidArgument(f"sysctl {key!r} value must be a single-line string")
        checked[key] = value

    def apply(spec: Spec) -> None:
        if find_namespace(spec, "network") is None:
            _refuse_net_sysctls_on_host(checked)
        linux = linux_of(spec)
        linux["sysctl"] = {**(linux.get("sysctl") or {}), **checked}

    return mutating(apply)


#: ``--pid`` and ``--ipc`` values ctrexec takes: docker's, less ``container:NAME``.
PID_MODES = ("host", "private")
IPC_MODES = ("host", "private", "shareable", "none")


def check_pid_mode(mode: str) -> None:
    """docker's ``--pid``: ``host`` shares the host's; ``private`` (the default) is own."""
    if mode not in PID_MODES:
        raise InvalidArgument(_mode_error("pid", "PID", mode, PID_MODES))


def check_ipc_mode(mode: str) -> None:
    """docker's ``--ipc``; ``shareable`` and ``none`` are ``private`` here (nothing joins
    another task's IPC namespace, and /dev/shm is the task's own tmpfs)."""
    if mode not in IPC_MODES:
        raise InvalidArgument(_mode_error("ipc", "IPC", mode, IPC_MODES))


def _mode_error(flag: str, what: str, mode: str, modes: tuple[str, ...]) -> str:
    if mode.startswith("container:"):
        return (
            f"--{flag}: container:NAME is not supported by ctrexec; a group's tasks share "
            "only the network namespace"
        )
    return f"--{flag}: invalid {what} mode {mode!r}; expected one of {', '.join(modes)}"
