"""Whether a group's pin still holds the namespace its running members are in.

A group's namespace is held by two things: the pin (``/run/netns/cx-NAME``, a bind
mount) and the processes of its running members. Either can go without the other: a
tmpfiles rule or another tool unmounts the pin while the tasks run on, or every task
exits and only the pin keeps the namespace. Namespaces are told apart by their nsfs
inode (``st_dev`` and ``st_ino``), so this costs one ``stat`` per member and one for
the pin: no netlink, no CNI, cheap enough for ``ps``.

:func:`check` says what state the pin is in; :func:`repin` binds a running member's
namespace back at the pin (:func:`ctrexec.net.netns.pin_from`), which keeps the
address: nothing was released, the namespace never went away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from ctrexec.errors import Conflict, FailedPrecondition
from ctrexec.net import netns

#: A namespace by its nsfs inode: (st_dev, st_ino).
NsId = tuple[int, int]
#: Every namespace file (``/proc/PID/ns/*``, a pin) lives on the one nsfs: its device.
_NSFS_REFERENCE = "/proc/self/ns/net"


def ns_id(path: str) -> NsId | None:
    """A namespace file's identity; None when nothing is there."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _nsfs_dev(stat_id: Callable[[str], NsId | None]) -> int | None:
    found = stat_id(_NSFS_REFERENCE)
    return found[0] if found else None


def ns_of_pid(pid: int, stat_id: Callable[[str], NsId | None] = ns_id) -> NsId | None:
    """The network namespace of a live process; None once it is gone."""
    return stat_id(f"/proc/{pid}/ns/net") if pid > 0 else None


@attrs.frozen
class PinCheck:
    """The pin and the running members' namespaces, as one look found them.

    ``pinned``: the namespace the pin holds, None when the pin is lost (no file, or a
    plain file with nothing mounted on it). ``members``: each running member's
    namespace, by name (a member whose process went meanwhile is left out).
    """

    pin: str
    pinned: NsId | None
    members: Mapping[str, NsId]

    @property
    def namespaces(self) -> dict[NsId, list[str]]:
        """The running members, sorted, by the namespace they are in."""
        out: dict[NsId, list[str]] = {}
        for name in sorted(self.members):
            out.setdefault(self.members[name], []).append(name)
        return out

    @property
    def lost(self) -> bool:
        return self.pinned is None

    @property
    def split(self) -> bool:
        """Members in two namespaces, or the pin holding another than theirs."""
        found = self.namespaces
        if len(found) > 1:
            return True
        return self.pinned is not None and bool(found) and self.pinned not in found

    @property
    def sound(self) -> bool:
        return not self.lost and not self.split

    def describe_split(self) -> str:
        """Which members are in which namespace, in a user's words (by inode)."""
        parts = []
        for ns, names in self.namespaces.items():
            mark = " (the pinned one)" if ns == self.pinned else ""
            parts.append(f"{', '.join(names)} in namespace {ns[1]}{mark}")
        if self.pinned is not None and self.pinned not in self.namespaces:
            parts.append(f"the pin {self.pin} holds namespace {self.pinned[1]}")
        return "; ".join(parts)

    def living_member(self) -> str | None:
        """A running member whose namespace may be pinned again (None: none, or a split)."""
        if self.split or not self.members:
            return None
        return sorted(self.members)[0]


def check(
    pin: str,
    pids: Mapping[str, int],
    stat_id: Callable[[str], NsId | None] = ns_id,
) -> PinCheck:
    """Look at the pin and at the namespaces of the running members' ``pids``."""
    nsfs = _nsfs_dev(stat_id)
    held = stat_id(pin)
    pinned = held if held is not None and nsfs is not None and held[0] == nsfs else None
    members = {}
    for name, pid in pids.items():
        found = ns_of_pid(pid, stat_id)
        if found is not None:
            members[name] = found
    return PinCheck(pin=pin, pinned=pinned, members=members)


def repin(name: str, found: PinCheck, pids: Mapping[str, int]) -> str | None:
    """Pin a running member's namespace again at ``found.pin`` (``name``: the netns
    name) when the pin was lost; which member it was taken from, or None when nothing
    was to do or none runs. A split is refused (FailedPrecondition naming which members
    are where, a Conflict): no namespace is chosen silently.
    """
    if found.split:
        raise Conflict(f"the group's members are in different namespaces: {found.describe_split()}")
    member = found.living_member()
    if member is None or not found.lost:
        return None
    netns.pin_from(name, f"/proc/{pids[member]}/ns/net")
    if ns_id(found.pin) != found.members[member]:  # its pid was reused meanwhile
        netns.remove(found.pin)
        raise FailedPrecondition(f"{member} exited while its namespace was pinned again")
    return member
