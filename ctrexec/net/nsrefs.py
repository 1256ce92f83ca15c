"""Telling a network namespace that is in use from one the kernel has not freed yet.

The kernel frees a network namespace asynchronously: once its last reference goes
(the ``/run/netns`` mount, the last process), a workqueue tears it down, and only
then do its interfaces go -- the host end of a veth pair with them. Measured here
(kernel 6.18, 2 cores): 10-30 ms after ``netns.remove``; a loaded CI machine took
seconds. Meanwhile the host end still hangs on its bridge, and for the first few
milliseconds the namespace even still answers an nsid lookup, so the kernel's own
liveness cannot tell "in use" from "going away".

So "in use" is decided by what pins a namespace for longer than a syscall: an nsfs
mount in this mount namespace (``/run/netns/*``, docker's and Nomad's pins alike) or
a thread of some process. A bridge port is *going away* when it is a veth whose peer
namespace is dying (no nsid, or the nsid no longer resolves) or pinned by neither;
every other port (a live peer, a peer in the host namespace, not a veth) is in use.
A namespace held only by an open fd or socket somewhere looks like going away; the
caller's bound on the wait (:meth:`ctrexec.net.networks.Networks.remove_bridge`) is what
turns that into an error instead of a hang.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import _linux, ids, procfs
from ctrexec.net import _pyroute2, netns, nsmarks

if TYPE_CHECKING:
    from ctrexec.paths import StrPath


def _candidate_paths() -> Iterator[str]:
    """Every nsfs pin in this mount namespace, then every thread's namespace link."""
    with contextlib.suppress(OSError):
        yield from (point for point, fstype in _linux.mount_table() if fstype == "nsfs")
    for proc in os.scandir("/proc"):
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for task in os.scandir(f"/proc/{proc.name}/task"):
                yield f"/proc/{proc.name}/task/{task.name}/ns/net"


def _nsid_of(ipr: Any, path: str, seen: set[tuple[int, int]]) -> int | None:
    """The nsid this (host) namespace gives the namespace at ``path``, once per inode."""
    _, netlink_error = _pyroute2.load()
    try:
        st = Path(path).stat()
    except OSError:
        return None  # a thread exited, a pin went meanwhile
    if (st.st_dev, st.st_ino) in seen:
        return None
    seen.add((st.st_dev, st.st_ino))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if _linux.fstatfs_type(fd) != _linux.NSFS_MAGIC:
            return None
        if _linux.ns_type(fd) != _linux.CLONE_NEWNET:
            return None
        answer = ipr.get_netnsid(fd=fd)
    except (OSError, netlink_error):
        return None
    finally:
        os.close(fd)
    nsid = None if answer is None else answer.get("nsid")
    return nsid if isinstance(nsid, int) and nsid >= 0 else None


def nsid_of(ipr: Any, path: str) -> int | None:
    """The nsid ``ipr``'s namespace gives the namespace at ``path``; None if it gives
    none (then none of its veths has a peer there) or ``path`` is no namespace."""
    return _nsid_of(ipr, path, set())


def pinned_nsids(ipr: Any) -> set[int]:
    """nsids (as ``ipr``'s namespace numbers them) of namespaces something pins.

    ``ipr`` is an IPRoute in the namespace whose view is wanted (the host's).
    Namespaces without an nsid there cannot be the peer of one of its veths, and are
    skipped.
    """
    seen: set[tuple[int, int]] = set()
    found = set()
    for path in _candidate_paths():
        nsid = _nsid_of(ipr, path, seen)
        if nsid is not None:
            found.add(nsid)
    return found


def _peer_nsid(link: Any) -> int | None:
    """A veth's IFLA_LINK_NETNSID; None for anything else, or a peer in this namespace."""
    info = link.get_attr("IFLA_LINKINFO")
    if info is None or info.get_attr("IFLA_INFO_KIND") != "veth":
        return None
    nsid = link.get_attr("IFLA_LINK_NETNSID")
    return nsid if isinstance(nsid, int) else None


def split_ports(ipr: Any, ports: Sequence[Any]) -> tuple[list[str], list[str]]:
    """(in use, going away) names of bridge port links from ``ipr``'s link dump."""
    in_use: list[str] = []
    going: list[str] = []
    pinned: set[int] | None = None
    for link in ports:
        name = str(link.get_attr("IFLA_IFNAME"))
        nsid = _peer_nsid(link)
        if nsid is None:
            in_use.append(name)
            continue
        if nsid >= 0:
            if pinned is None:  # scanning /proc is only worth it when a veth is left
                pinned = pinned_nsids(ipr)
            if nsid in pinned:
                in_use.append(name)
                continue
        going.append(name)
    return in_use, going


@attrs.frozen
class NetnsUser:
    """One thing besides its own pin that keeps a network namespace alive: a process
    with a thread inside or an fd of it open, or another nsfs mount of it."""

    how: str  # "process", "fd" or "mount"
    pid: int | None = None
    command: str = ""
    container: str | None = None  # the ctrexec task whose cgroup the process is in
    mount: str | None = None

    def __str__(self) -> str:
        if self.mount is not None:
            return f"mount {self.mount}"
        who = f"pid {self.pid} ({self.command})"
        if self.container is not None:
            who += f" of container {self.container}"
        return who + (" through an open fd" if self.how == "fd" else "")


def _held(pid: str, wanted: Collection[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """Each of the ``wanted`` namespaces ``pid`` holds: "process" when a thread of it is
    inside, "fd" when it only has it open (a process that exits meanwhile holds none)."""
    held: dict[tuple[int, int], str] = {}
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                st = Path(task.path, "ns", "net").stat()
                if (st.st_dev, st.st_ino) in wanted:
                    held[(st.st_dev, st.st_ino)] = "process"
    links = {f"net:[{ino}]": (dev, ino) for dev, ino in wanted}
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                key = links.get(str(Path(fd.path).readlink()))
                if key is not None:
                    held.setdefault(key, "fd")
    return held


def _process(pid: str, how: str) -> NetnsUser:
    command, container = "?", None
    with contextlib.suppress(OSError):
        command = Path(f"/proc/{pid}/comm").read_text().strip()
    for path in (procfs.proc_cgroups(pid) or {}).values():
        task = ids.task_of_cgroup(path)
        if task is not None:
            container = task[1]
            break
    return NetnsUser(how=how, pid=int(pid), command=command, container=container)


def users_of_each(paths: Sequence[str]) -> dict[str, list[NetnsUser]]:
    """What keeps each namespace pinned at one of ``paths`` alive besides that pin, for
    ``netns rm`` to refuse and ``netns ls`` to show; /proc is read once for all of them.
    This process does not count. Another name of the same namespace is a mount of it."""
    found: dict[str, list[NetnsUser]] = {p: [] for p in paths}
    names: dict[tuple[int, int], list[str]] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            st = Path(path).stat()
            names.setdefault((st.st_dev, st.st_ino), []).append(path)
    for point, fstype in _linux.mount_table() if names else ():
        if fstype == "nsfs":
            with contextlib.suppress(OSError):
                st = Path(point).stat()
                for path in names.get((st.st_dev, st.st_ino), []):
                    if path != point:
                        found[path].append(NetnsUser(how="mount", mount=point))
    me = str(os.getpid())
    for proc in os.scandir("/proc") if names else ():
        if proc.name.isdigit() and proc.name != me:
            for key, how in _held(proc.name, names).items():
                user = _process(proc.name, how)
                for path in names[key]:
                    found[path].append(user)
    return found


def users_of(path: str) -> list[NetnsUser]:
    """:func:`users_of_each` for one namespace."""
    return users_of_each([path])[path]


@attrs.frozen
class NetnsUsage:
    """Who made a pinned namespace and what keeps it alive: what a scheduler asks before
    it reuses or removes a name in ``/run/netns``, which docker, Nomad and ``ip netns``
    share with ctrexec. ``users`` is empty when only its pin holds it."""

    name: str
    path: str
    made_by_ctrexec: bool
    users: tuple[NetnsUser, ...]


def usage(*names: StrPath) -> list[NetnsUsage]:
    """The usage of each named namespace (a name under /run/netns or a path), or of
    every one :func:`ctrexec.net.netns.list_namespaces` lists when none is named.
    /proc is read once for all of them, so listing many costs one scan."""
    paths = [netns.resolve(n) for n in names] or [n.path for n in netns.list_namespaces()]
    found = users_of_each(paths)
    return [
        NetnsUsage(
            name=Path(p).name,
            path=p,
            made_by_ctrexec=nsmarks.made_by_ctrexec(p),
            users=tuple(found[p]),
        )
        for p in paths
    ]


__all__ = [
    "NetnsUsage",
    "NetnsUser",
    "nsid_of",
    "pinned_nsids",
    "split_ports",
    "usage",
    "users_of",
    "users_of_each",
]
