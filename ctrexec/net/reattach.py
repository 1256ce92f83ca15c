"""CNI ADD that asks for an address the group had: a repaired attachment keeps its address.

A group's address is what its peers, its hosts files and a scheduler's service entries
know it by; a re-attachment (its veth or bridge was deleted) or a re-made namespace
(the CNI cache was lost) should come back with it. host-local gives a requested address
through ``CNI_ARGS`` ``IP=<addr>`` (containernetworking/plugins' host-local: "request a
specific IP address from a subnet"), and fails if it is taken or out of range. Then the
ADD is made again without the request, and a warning says the address changed: the
returned result (and so the attachment's addresses) is the truth either way.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence

from ctrexec.errors import FailedPrecondition, NetworkError
from ctrexec.net import ports as _ports
from ctrexec.net.cni import CNI, CNIAttachment, CNIResult, NetworkConfigList, PortMapping

log = logging.getLogger(__name__)


def asks_host_local(conf: NetworkConfigList) -> bool:
    """Whether a plugin of the conflist allocates through host-local (which reads IP)."""
    return any((p.get("ipam") or {}).get("type") == "host-local" for p in conf.plugins)


def requested(prefer: Sequence[str]) -> str | None:
    """The one address to ask for (CNI_ARGS carries one IP): the first valid one, bare."""
    for text in prefer:
        try:
            return str(ipaddress.ip_interface(text.strip()).ip)
        except ValueError:
            continue
    return None


def check_same_ports(cached: CNIAttachment, ports: Sequence[PortMapping]) -> None:
    """FailedPrecondition unless a sound attachment, kept as it is, has ``ports``."""
    have = _ports.ports_of(cached)
    if set(have) != set(ports):
        shown = ", ".join(_ports.describe(p) for p in have) or "no ports"
        raise FailedPrecondition(
            f"group {cached.container_id} is attached to {cached.network} with {shown}; "
            "tear it down to change its ports"
        )


def _ips(result: CNIResult, ifname: str) -> str:
    own = result.container_ips(ifname) or result.ips
    return ", ".join(i.ip for i in own) or "no address"


def add(
    cni: CNI,
    conf: NetworkConfigList,
    owner: str,
    netns_path: str | os.PathLike[str],
    *,
    ifname: str,
    ports: Sequence[PortMapping],
    prefer: Sequence[str] = (),
) -> CNIResult:
    """CNI ADD of ``owner``, asking for the first of ``prefer`` when the network's IPAM is
    host-local; a refusal falls back to a fresh address, with a warning saying so."""
    want = requested(prefer) if asks_host_local(conf) else None
    if want is None:
        return cni.add(conf, owner, netns_path, ifname, port_mappings=ports)
    try:
        return cni.add(conf, owner, netns_path, ifname, args={"IP": want}, port_mappings=ports)
    except NetworkError as exc:
        if cni.cache_path(conf.name, owner, ifname).exists():
            raise  # the rollback did not finish: the next setup DELs it first
        refused = exc
    result = cni.add(conf, owner, netns_path, ifname, port_mappings=ports)
    log.warning(
        "%s could not get its address %s back in network %s (%s); it has %s now",
        owner,
        want,
        conf.name,
        refused,
        _ips(result, ifname),
    )
    return result


__all__ = ["add", "asks_host_local", "check_same_ports", "requested"]
