"""The host's routes, read from /proc, and the overlap check a bridge subnet must pass.

A bridge subnet that shares addresses with a host route would make the host send
part of that route's traffic into the bridge (or the reverse), so
:class:`ctrexec.net.networks.Networks` refuses it before the first ADD.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Sequence
from pathlib import Path

import attrs


@attrs.frozen
class HostRoute:
    """One route of the host's main table, as far as overlap checks care."""

    dst: ipaddress.IPv4Network | ipaddress.IPv6Network
    ifname: str


def parse_proc_route(text: str) -> list[HostRoute]:
    """``/proc/net/route``: IPv4 main table, addresses as little-endian hex."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            dst = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
            net = ipaddress.IPv4Network(f"{dst}/{mask}", strict=False)
        except ValueError:
            continue
        out.append(HostRoute(dst=net, ifname=fields[0]))
    return out


def parse_proc_ipv6_route(text: str) -> list[HostRoute]:
    """``/proc/net/ipv6_route``: dst, prefix length (hex), ..., device last."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            dst = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            net = ipaddress.IPv6Network(f"{dst}/{int(fields[1], 16)}", strict=False)
        except ValueError:
            continue
        if not net.is_multicast:  # every link has ff00::/8; no unicast subnet meets it
            out.append(HostRoute(dst=net, ifname=fields[9]))
    return out


def host_routes() -> list[HostRoute]:
    """The routes of this process's (the host's) namespace, read from /proc: no fork.

    /proc/self/net follows the main thread, which never leaves the host namespace.
    """
    out = []
    for name, parse in (
        ("route", parse_proc_route),
        ("ipv6_route", parse_proc_ipv6_route),
    ):
        with contextlib.suppress(FileNotFoundError):  # no IPv6 in this kernel
            out += parse(Path("/proc/self/net", name).read_text(encoding="ascii"))
    return out


def find_overlap(
    subnet: ipaddress.IPv4Network | ipaddress.IPv6Network,
    routes: Sequence[HostRoute],
    bridge: str,
) -> HostRoute | None:
    """The first host route that shares addresses with ``subnet``, if any.

    Default routes are skipped (they overlap everything and mean nothing here), and
    so is the bridge's own route to exactly ``subnet``: after the first ADD, the
    bridge carries the gateway address and with it that route.
    """
    for route in routes:
        if route.dst.version != subnet.version or route.dst.prefixlen == 0:
            continue
        if route.ifname == bridge and route.dst == subnet:
            continue
        if route.dst.overlaps(subnet):
            return route
    return None


__all__ = [
    "HostRoute",
    "find_overlap",
    "host_routes",
    "parse_proc_ipv6_route",
    "parse_proc_route",
]
