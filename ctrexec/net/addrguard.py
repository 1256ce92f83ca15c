"""One address per group: what runs around each ADD so no live address is handed out twice.

Before the ADD, host-local's store is reconciled with the addresses that exist
(:mod:`ctrexec.net.holders`, plus what the caller's records say); after it, the new
address is probed for on the group's link (:mod:`ctrexec.net.dad`), which also
catches holders ctrexec cannot see. :class:`ctrexec.net.networks.Networks` calls
both under its lock. Then the address is announced (:func:`announce`): every attach
and re-attach (``group up``, ``start``'s re-wire, ``run -p``, the supervisor's re-make
after a reboot) passes through that ADD, and a re-made veth's new MAC must reach the
host's neighbour table before the attach reports success.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ctrexec.errors import AlreadyExists
from ctrexec.net import dad, holders, ipamstore, iptables, netns, ports, reach
from ctrexec.net.cni import NetworkConfigList, PortMapping

log = logging.getLogger(__name__)


def reconcile(conf: NetworkConfigList, owner: str, ifname: str, held: Mapping[str, str]) -> None:
    """Reserve, in each host-local store of ``conf``, the live addresses it has lost.

    Live: the group namespaces' addresses on ``ifname``, then ``held`` (address ->
    holder, from records' labels) for holders with no address in sight.
    ``owner``'s own addresses are left to the ADD.
    """
    pools = ipamstore.host_local_pools(conf.name, conf.plugins)
    if not pools:
        return
    live = holders.live_addresses(ifname)
    seen = set(live.values())
    for text, holder in held.items():
        if holder in seen:  # its namespace says what it holds; a label may be stale
            continue
        try:
            live.setdefault(ipaddress.ip_address(text), holder)
        except ValueError:
            log.warning("ignoring %r held by %s: not an address", text, holder)
    for pool in pools:
        ipamstore.reconcile(pool, live, ifname=ifname, skip=owner)


def clear_port_holders(network: str, owner: str, wanted: Sequence[PortMapping]) -> None:
    """Before publishing ``wanted``: another group's DNAT rules for one of its host
    ports are refused while that group's namespace lives (AlreadyExists, as for a
    cached attachment's ports) and removed when it is gone (a lost cache left them)."""
    if not wanted:
        return
    held = iptables.port_holders(iptables.list_rules(), network)
    for mapping in wanted:
        holder = held.get((mapping.protocol, mapping.host_port))
        if holder is None or holder == owner:
            continue
        if Path(netns.resolve(holders.NETNS_PREFIX + holder)).exists():
            raise AlreadyExists(
                f"port {ports.describe(mapping)} is already mapped by group {holder}"
            )
        log.warning("removing the stale NAT rules of %s on %s (its namespace is gone)",
                    holder, network)  # fmt: skip
        iptables.remove_attachment(network, holder)


def conflict(netns_path: str, ifname: str, owner: str, addresses: Iterable[str]) -> str | None:
    """The one-line conflict report for the first of ``addresses`` (with or without a
    prefix) that another host answers for on ``owner``'s link; None if all are free.

    IPv6 is left to the kernel's own DAD. NetworkError if a probe cannot be sent.
    """
    for text in addresses:
        address = ipaddress.ip_interface(text).ip
        if not isinstance(address, ipaddress.IPv4Address):
            continue
        mac = dad.probe(netns_path, ifname, address)
        if mac is not None:
            holder = holders.holder_of(address, ifname, besides=owner)
            return dad.conflict_message(str(address), owner, holder, mac)
    return None


def announce(
    netns_path: str, ifname: str, addresses: Iterable[str], bridge: str | None
) -> str | None:
    """Announce each IPv4 of ``addresses`` from ``ifname`` in the namespace (RFC 5227),
    then check from the host that it reaches them through ``bridge``
    (:func:`ctrexec.net.reach.confirm`); None when it does, else the first reason it
    does not. Without a bridge (a user's macvlan, ipvlan) the announcement is all.

    IPv6 is left to the kernel (its DAD ends with an unsolicited advertisement).
    NetworkError if an announcement cannot be sent.
    """
    for text in addresses:
        address = ipaddress.ip_interface(text).ip
        if not isinstance(address, ipaddress.IPv4Address):
            continue
        mac = dad.announce(netns_path, ifname, address)
        if bridge is None:
            continue
        why = reach.confirm(bridge, address, mac)
        if why is not None:
            return why
    return None


__all__ = ["announce", "clear_port_holders", "conflict", "reconcile"]
