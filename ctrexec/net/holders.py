"""Who holds which address: the live ctrexec group namespaces, read from the kernel.

The pinned ``cx-*`` namespaces (:data:`NETNS_PREFIX`) are the truth about which
group uses which address, whatever IPAM's store or CNI's cache say after a wipe.
Read per namespace over netlink (:mod:`ctrexec.net.nsinfo`); a namespace that
vanishes or cannot be read while scanning holds nothing.
"""

from __future__ import annotations

import ipaddress
import logging

from ctrexec.errors import CtrexecError
from ctrexec.net import netns, nsinfo

log = logging.getLogger(__name__)

#: What a group's name becomes as its namespace's name: ``cx-web``. Owned here, below
#: :mod:`ctrexec.net.networks`, which reads these namespaces before each ADD;
#: :mod:`ctrexec.net.groupns` names them with it.
NETNS_PREFIX = "cx-"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def all_holders(ifname: str) -> dict[IPAddress, list[str]]:
    """Every address on ``ifname`` of every pinned group namespace -> the groups that
    carry it, in name order: more than one is the damage an address held twice is."""
    out: dict[IPAddress, list[str]] = {}
    for ns in netns.list_namespaces():
        if not ns.name.startswith(NETNS_PREFIX):
            continue
        try:
            info = nsinfo.inspect(ns.path)
        except CtrexecError as exc:  # stale pin, or removed while we scan
            log.debug("skipping %s: %s", ns.path, exc)
            continue
        group = ns.name[len(NETNS_PREFIX) :]
        for address in info.addresses_of(ifname):
            groups = out.setdefault(ipaddress.ip_address(address.address), [])
            if group not in groups:
                groups.append(group)
    return out


def live_addresses(ifname: str) -> dict[IPAddress, str]:
    """Every address on ``ifname`` of every pinned group namespace -> the group (the
    first by name, should two carry it)."""
    return {address: groups[0] for address, groups in all_holders(ifname).items()}


def holder_of(address: IPAddress, ifname: str, *, besides: str) -> str | None:
    """The group other than ``besides`` whose namespace carries ``address``, if any."""
    for ns in netns.list_namespaces():
        group = ns.name[len(NETNS_PREFIX) :]
        if not ns.name.startswith(NETNS_PREFIX) or group == besides:
            continue
        try:
            info = nsinfo.inspect(ns.path)
        except CtrexecError:
            continue
        if any(ipaddress.ip_address(a.address) == address for a in info.addresses_of(ifname)):
            return group
    return None


__all__ = ["NETNS_PREFIX", "all_holders", "holder_of", "live_addresses"]
