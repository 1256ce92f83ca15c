"""Whether a group's CNI attachment still works: eth0, its address, its host end, the bridge.

The CNI cache says what an ADD made; nothing keeps it true. A person or a tool may delete
the host end of a veth (which takes ``eth0`` with it), ``eth0`` inside the namespace, or
the bridge (whose ports then hang on nothing: a second group's ADD makes a new bridge,
and the old veth stays off it). The published port then goes dead with no error anywhere.
This module reads what is there and says what is wrong, in the words ``ps`` and the
supervisor's log show, each with the command that repairs it; ``Networks.setup`` uses
it to decide that a cached attachment must be made again (with the same address).

A veth's host end is found from the host: the veth whose peer (IFLA_LINK) is eth0's
index, in the namespace (IFLA_LINK_NETNSID) the host numbers as the group's. Links of
other kinds (macvlan, ipvlan: a user's conflist) have no host end to check, and a
conflist without a bridge plugin has no bridge to check.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs

from ctrexec.errors import CtrexecError
from ctrexec.net import netns, nsrefs
from ctrexec.net.cni import CNIAttachment, CNIIPConfig

_IFF_UP = 0x1
#: The bridge plugin's bridge when its config names none.
_DEFAULT_BRIDGE = "cni0"
#: What a group's problem tells the user to run.
GROUP_REPAIR = "ctrexec group up FILE"


class Records(Protocol):
    """What :func:`problems` asks of a :class:`~ctrexec.net.networks.Networks` (which
    imports this module, so it is named by its methods, not imported)."""

    @property
    def ifname(self) -> str: ...

    def network_of(self, mode: Any) -> str | None: ...

    def record(self, owner: str, mode: Any) -> CNIAttachment | None: ...

    def bridge_of(self, mode: Any) -> str | None: ...


@attrs.frozen
class Link:
    """What the check needs of one link from a netlink dump."""

    index: int
    name: str
    kind: str | None = None
    up: bool = True
    master: int | None = None
    #: IFLA_LINK: a veth's peer's index, in the namespace of ``peer_nsid``.
    peer_index: int | None = None
    peer_nsid: int | None = None


@attrs.frozen
class Snapshot:
    """The group's interface as its namespace has it, and the host's links."""

    ns_name: str
    ifname: str
    iface: Link | None
    #: The interface's addresses, as ``ipaddress`` interfaces (``10.89.0.2/24``).
    addresses: frozenset[ipaddress.IPv4Interface | ipaddress.IPv6Interface]
    host_links: tuple[Link, ...]
    #: The nsid the host gives the group's namespace; None if it gives none.
    nsid: int | None


@attrs.frozen
class Health:
    """The problems of one cached attachment, and whether its address is this namespace's.

    ``own`` is False when the old attachment's host end (named in the cached result)
    still exists with its peer in another namespace: a namespace re-made at the same
    path, while the old one lives on with the address. That address is not asked back.
    """

    problems: tuple[str, ...]
    own: bool


def link_of(msg: Any) -> Link:
    """A :class:`Link` from a pyroute2 link message."""
    info = msg.get_attr("IFLA_LINKINFO")
    nsid = msg.get_attr("IFLA_LINK_NETNSID")
    return Link(
        index=msg["index"],
        name=msg.get_attr("IFLA_IFNAME") or f"if{msg['index']}",
        kind=None if info is None else info.get_attr("IFLA_INFO_KIND"),
        up=bool(msg["flags"] & _IFF_UP),
        master=msg.get_attr("IFLA_MASTER"),
        peer_index=msg.get_attr("IFLA_LINK"),
        peer_nsid=nsid if isinstance(nsid, int) and nsid >= 0 else None,
    )


def read(netns_path: str, ifname: str) -> Snapshot:
    """Read the namespace's ``ifname`` and the host's links (NetworkError and kin if the
    namespace cannot be read). The host is dumped first: the dump is what makes the
    kernel number a veth's peer namespace, which the nsid lookup then finds."""
    with netns.netlink(netns_path) as ipr:
        iface = next((link_of(m) for m in ipr.link("dump") if _name(m) == ifname), None)
        addrs = list(ipr.addr("dump")) if iface is not None else []
    found = frozenset(
        ipaddress.ip_interface(f"{a}/{m['prefixlen']}")
        for m in addrs
        if iface is not None
        and m["index"] == iface.index
        and (a := m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS"))
    )
    with netns.netlink("/proc/self/ns/net", allow_host=True) as host:
        host_links = tuple(link_of(m) for m in host.link("dump"))
        nsid = nsrefs.nsid_of(host, netns_path)
    return Snapshot(
        ns_name=Path(netns_path).name,
        ifname=ifname,
        iface=iface,
        addresses=found,
        host_links=host_links,
        nsid=nsid,
    )


def _name(msg: Any) -> str | None:
    name = msg.get_attr("IFLA_IFNAME")
    return name if isinstance(name, str) else None


def host_end(snap: Snapshot) -> Link | None:
    """The host's veth paired with the group's interface; None if there is none."""
    iface = snap.iface
    if iface is None or snap.nsid is None:
        return None
    return next(
        (
            link
            for link in snap.host_links
            if link.kind == "veth"
            and link.peer_index == iface.index
            and link.peer_nsid == snap.nsid
        ),
        None,
    )


def judge(snap: Snapshot, want: Sequence[str], bridge: str | None) -> list[str]:
    """What is wrong with the attachment in ``snap``: empty when sound. ``want`` are the
    cached addresses with their prefix; ``bridge`` None when the network has none."""
    name, ns = snap.ifname, snap.ns_name
    if snap.iface is None:
        return [f"{name} is gone from {ns}"]
    out = []
    missing = [w for w in want if ipaddress.ip_interface(w) not in snap.addresses]
    if missing:
        out.append(f"{name} in {ns} lacks its address {', '.join(missing)}")
    if snap.iface.kind != "veth" or bridge is None:
        return out
    peer = host_end(snap)
    if peer is None:
        return [*out, f"the host end of {name} in {ns} is gone"]
    if not peer.up:
        out.append(f"{peer.name}, the host end of {name} in {ns}, is down")
    found = next((link for link in snap.host_links if link.name == bridge), None)
    if found is None:
        out.append(
            f"bridge {bridge} is gone ({peer.name}, the host end of {name} in {ns}, "
            "is on no bridge)"
        )
    elif peer.master != found.index:
        out.append(f"{peer.name}, the host end of {name} in {ns}, is not on bridge {bridge}")
    elif not found.up:
        out.append(f"bridge {bridge} is down")
    return out


def bridge_of(cached: CNIAttachment) -> str | None:
    """The bridge the attachment's conflist puts its host ends on; None without one."""
    return bridge_in(cached.config.plugins)


def bridge_in(plugins: Sequence[Any]) -> str | None:
    """The bridge a conflist's plugins put host ends on; None without a bridge plugin."""
    for plugin in plugins:
        if plugin.get("type") == "bridge":
            name = plugin.get("bridge")
            return name if isinstance(name, str) and name else _DEFAULT_BRIDGE
    return None


def result_ips(cached: CNIAttachment) -> tuple[CNIIPConfig, ...]:
    """The cached addresses of the attachment's own interface."""
    if cached.result is None:
        return ()
    # Plugins that do not say which interface an IP is on get the benefit of the doubt.
    own = cached.result.container_ips(cached.ifname)
    return own or tuple(i for i in cached.result.ips if i.interface is None)


def addresses(cached: CNIAttachment) -> list[str]:
    """:func:`result_ips` with their prefix (``10.89.0.2/24``)."""
    return [i.address for i in result_ips(cached)]


def _old_host_ends(cached: CNIAttachment, bridge: str | None) -> set[str]:
    """The host-side interfaces the ADD reported (outside any sandbox, not the bridge)."""
    if cached.result is None:
        return set()
    return {i.name for i in cached.result.interfaces if not i.sandbox and i.name != bridge}


def owns(snap: Snapshot, cached: CNIAttachment, bridge: str | None) -> bool:
    """Whether the old attachment is this namespace's (see :attr:`Health.own`)."""
    if snap.iface is not None and {ipaddress.ip_interface(a) for a in addresses(cached)} <= (
        snap.addresses
    ):
        return True
    ours = host_end(snap)
    olds = _old_host_ends(cached, bridge)
    return not any(
        link.name in olds and link.kind == "veth" and link != ours for link in snap.host_links
    )


def assess(cached: CNIAttachment) -> Health:
    """The health of a cached attachment in the namespace it was made in."""
    bridge = bridge_of(cached)
    try:
        snap = read(cached.netns, cached.ifname)
    except CtrexecError as exc:
        return Health(problems=(f"{Path(cached.netns).name} cannot be read: {exc}",), own=False)
    return Health(
        problems=tuple(judge(snap, addresses(cached), bridge)),
        own=owns(snap, cached, bridge),
    )


def faults(
    networks: Records, owner: str, netns_path: str | os.PathLike[str], mode: Any
) -> list[str]:
    """What is wrong with ``owner``'s attachment in ``mode``'s network (a NetworkMode or
    its text), as facts; empty when it is sound or ``mode`` has no network."""
    network = networks.network_of(mode)
    if network is None:
        return []
    path = os.fspath(netns_path)
    cached = networks.record(owner, mode)
    if cached is None or cached.result is None:
        return unrecorded(path, networks.ifname, networks.bridge_of(mode))
    if cached.netns != path:
        return [f"the attachment to {network} is of {cached.netns}, not {path}"]
    return list(assess(cached).problems)


def unrecorded(netns_path: str, ifname: str, bridge: str | None) -> list[str]:
    """What is wrong with an attachment CNI has no record of (its cache was wiped: a
    tmpfs after a reboot, a hand's ``rm``), judged from the kernel alone: ``ifname``
    there with an address, its host end up on ``bridge``. A sound one is not damage:
    its traffic flows, and re-wiring it would cut it (a new veth, a new MAC) for
    nothing; the next attach of the group finds and keeps its address."""
    try:
        snap = read(netns_path, ifname)
    except CtrexecError as exc:
        return [f"{Path(netns_path).name} cannot be read: {exc}"]
    out = judge(snap, (), bridge)
    if snap.iface is not None and not any(not a.ip.is_link_local for a in snap.addresses):
        out.insert(0, f"{ifname} in {snap.ns_name} has no address")
    return out


def problems(
    networks: Records,
    owner: str,
    netns_path: str | os.PathLike[str],
    mode: Any,
    *,
    repair: str = GROUP_REPAIR,
) -> list[str]:
    """:func:`faults` in the user's words, each naming ``repair``."""
    found = faults(networks, owner, netns_path, mode)
    return [f"not attached: {p}; run `{repair}`" for p in found]


__all__ = [
    "GROUP_REPAIR",
    "Health",
    "Link",
    "Records",
    "Snapshot",
    "addresses",
    "assess",
    "bridge_in",
    "bridge_of",
    "faults",
    "host_end",
    "judge",
    "link_of",
    "owns",
    "problems",
    "read",
    "result_ips",
    "unrecorded",
]
