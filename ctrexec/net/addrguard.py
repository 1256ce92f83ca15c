"""One address per group: what runs around each ADD so no live address is handed out twice.

Before the ADD, host-local's store is reconciled with the addresses that exist
(:mod:`ctrexec.net.holders`, plus what the caller's records say); after it, the new
address is probed for on the group's link (:mod:`ctrexec.net.dad`), which also
catches holders ctrexec cannot see. :class:`ctrexec.net.networks.Networks` calls
both under its lock.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ctrexec.errors import AlreadyExists
from ctrexec.net import dad, holders, ipamstore, iptables, netns, ports
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


__all__ = ["clear_port_holders", "conflict", "reconcile"]
