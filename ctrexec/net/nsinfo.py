"""What a network namespace holds: its links, addresses and main-table routes.

Read over one netlink socket opened inside the namespace (:func:`netns.netlink`, fork-free),
for ``netns inspect``, a task's addresses in ``inspect``, and the tests' checks.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec.net import netns

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

_RT_TABLE_MAIN = 254
_IFF_UP = 0x1


@attrs.frozen
class Interface:
    """One link inside a namespace, as netlink reports it."""

    index: int
    name: str
    kind: str | None
    mac: str | None
    mtu: int
    up: bool
    oper_state: str


@attrs.frozen
class Address:
    """One address on a link inside a namespace."""

    ifname: str
    family: int
    address: str
    prefixlen: int

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"


@attrs.frozen
class Route:
    """One route of the main table; ``dst`` is ``default`` or a CIDR."""

    family: int
    dst: str
    gateway: str | None
    ifname: str | None


@attrs.frozen
class NetNSInfo:
    """A snapshot of a namespace: its inode identity, links, addresses, routes."""

    path: str
    inode: int
    interfaces: tuple[Interface, ...]
    addresses: tuple[Address, ...]
    routes: tuple[Route, ...]

    def interface(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def addresses_of(self, ifname: str) -> tuple[Address, ...]:
        return tuple(a for a in self.addresses if a.ifname == ifname)


def _attr(msg: Any, name: str) -> Any:
    return msg.get_attr(name)


def _link_kind(msg: Any) -> str | None:
    info = _attr(msg, "IFLA_LINKINFO")
    return None if info is None else info.get_attr("IFLA_INFO_KIND")


def inspect(path: StrPath, *, allow_host: bool = False) -> NetNSInfo:
    """Links (mac, mtu, state), addresses and main-table routes of a namespace."""
    text = os.fspath(path)
    with netns.netlink(text, allow_host=allow_host) as ipr:
        try:
            links = list(ipr.link("dump"))
            addrs = list(ipr.addr("dump"))
            routes = list(ipr.route("dump"))
        except OSError as exc:
            raise netns.os_error(f"netlink dump in {text} failed", exc) from exc
    interfaces = tuple(_interface(msg) for msg in links)
    names = {i.index: i.name for i in interfaces}
    try:
        inode = Path(text).stat().st_ino
    except OSError as exc:
        raise netns.os_error(f"cannot stat {text}", exc) from exc
    return NetNSInfo(
        path=text,
        inode=inode,
        interfaces=interfaces,
        addresses=tuple(a for msg in addrs if (a := _address(msg, names)) is not None),
        routes=tuple(r for msg in routes if (r := _route(msg, names)) is not None),
    )


def _interface(msg: Any) -> Interface:
    return Interface(
        index=msg["index"],
        name=_attr(msg, "IFLA_IFNAME") or f"if{msg['index']}",
        kind=_link_kind(msg),
        mac=_attr(msg, "IFLA_ADDRESS"),
        mtu=_attr(msg, "IFLA_MTU") or 0,
        up=bool(msg["flags"] & _IFF_UP),
        oper_state=_attr(msg, "IFLA_OPERSTATE") or "UNKNOWN",
    )


def _address(msg: Any, names: dict[int, str]) -> Address | None:
    """IFA_LOCAL is the interface's own address; on point-to-point links IFA_ADDRESS
    is the peer's, so it is only the fallback."""
    address = _attr(msg, "IFA_LOCAL") or _attr(msg, "IFA_ADDRESS")
    if address is None:
        return None
    return Address(
        ifname=names.get(msg["index"], f"if{msg['index']}"),
        family=ipaddress.ip_address(address).version,
        address=address,
        prefixlen=msg["prefixlen"],
    )


def _route(msg: Any, names: dict[int, str]) -> Route | None:
    """Main-table IPv4/IPv6 routes only: local and broadcast entries are the
    kernel's bookkeeping, not what a user set up."""
    table = _attr(msg, "RTA_TABLE") or msg["table"]
    if table != _RT_TABLE_MAIN or msg["family"] not in (socket.AF_INET, socket.AF_INET6):
        return None
    dst = _attr(msg, "RTA_DST")
    oif = _attr(msg, "RTA_OIF")
    return Route(
        family=4 if msg["family"] == socket.AF_INET else 6,
        dst="default" if dst is None else f"{dst}/{msg['dst_len']}",
        gateway=_attr(msg, "RTA_GATEWAY"),
        ifname=names.get(oif) if oif is not None else None,
    )
