"""Whether the host reaches a group's address on its new veth, right after an ADD.

A re-attachment (eth0 or its host end deleted, a re-made namespace, a reboot) gives the
group a new veth with a new MAC at its old address. The host's neighbour entry for the
address on the bridge may still hold the old MAC, REACHABLE for up to ~30 s: DNAT sends
the published port's traffic there and the bridge floods it to no one. The group's
announcement (:func:`ctrexec.net.dad.announce`) replaces such entries; this module then
checks the outcome from the host, so an attach reports success only when traffic flows:
one ICMP echo round trip through the bridge, and the host's entry on the new MAC.

The published port itself is served by a member that may not have started yet (an
attachment is made before any task), so the port is not asked here; the path to the
address, which every published port's DNAT rule uses, is.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import select
import socket
import struct
import time

import attrs

from ctrexec.net import netns

log = logging.getLogger(__name__)

#: How long the host's echo requests are repeated for before the address counts as
#: unreachable; a sound attachment answers at once (well under a millisecond).
TIMEOUT = 10.0
_RESEND = 0.1
_ICMP_ECHO_REPLY = 0
_ICMP_ECHO_REQUEST = 8
_ICMP_HEADER = struct.Struct("!BBHHH")
# Neighbour states (linux/neighbour.h) in which the entry's MAC is used for traffic.
_NUD_USABLE = 0x02 | 0x04 | 0x08 | 0x10 | 0x80  # REACHABLE STALE DELAY PROBE PERMANENT
_HOST_NS = "/proc/self/ns/net"


@attrs.frozen
class Entry:
    """The host's neighbour entry for an address on a bridge."""

    mac: str | None
    state: int

    @property
    def usable(self) -> bool:
        return self.mac is not None and bool(self.state & _NUD_USABLE)


def _bridge_index(ipr: object, bridge: str) -> int | None:
    found = ipr.link_lookup(ifname=bridge)  # type: ignore[attr-defined]
    return int(found[0]) if found else None


def host_entry(bridge: str, address: ipaddress.IPv4Address) -> Entry | None:
    """The host's neighbour entry for ``address`` on ``bridge``; None if it has none."""
    with netns.netlink(_HOST_NS, allow_host=True) as ipr:
        index = _bridge_index(ipr, bridge)
        if index is None:
            return None
        for msg in ipr.neigh("dump", family=socket.AF_INET):
            if msg["ifindex"] == index and msg.get_attr("NDA_DST") == str(address):
                mac = msg.get_attr("NDA_LLADDR")
                return Entry(mac=mac.lower() if isinstance(mac, str) else None, state=msg["state"])
    return None


def forget(bridge: str, address: ipaddress.IPv4Address) -> None:
    """Delete the host's neighbour entry for ``address`` on ``bridge`` (the next packet
    asks anew); nothing if there is none."""
    with netns.netlink(_HOST_NS, allow_host=True) as ipr:
        index = _bridge_index(ipr, bridge)
        if index is None:
            return
        try:
            ipr.neigh("del", dst=str(address), ifindex=index)
        except Exception as exc:  # pyroute2's NetlinkError: the entry is gone already
            log.debug("no neighbour entry for %s on %s to delete: %s", address, bridge, exc)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = int(sum(struct.unpack(f"!{len(data) // 2}H", data)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _request(ident: int, seq: int) -> bytes:
    payload = b"ctrexec-reach"
    head = _ICMP_HEADER.pack(_ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    return _ICMP_HEADER.pack(_ICMP_ECHO_REQUEST, 0, _checksum(head + payload), ident, seq) + payload


def _is_reply(packet: bytes, ident: int, source: str, address: ipaddress.IPv4Address) -> bool:
    if source != str(address) or len(packet) < 20:
        return False
    body = packet[(packet[0] & 0x0F) * 4 :]  # a raw IPv4 socket gets the IP header too
    if len(body) < _ICMP_HEADER.size:
        return False
    kind, _, _, got, _ = _ICMP_HEADER.unpack_from(body)
    return bool(kind == _ICMP_ECHO_REPLY and got == ident)


def echo(address: ipaddress.IPv4Address, timeout: float = TIMEOUT) -> bool | None:
    """Whether ``address`` answers an ICMP echo from the host within ``timeout``; the
    request is repeated every 0.1 s (the first may wait on address resolution). None
    if no echo can be sent (no CAP_NET_RAW)."""
    ident = os.getpid() & 0xFFFF
    try:
        opened = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    except OSError as exc:
        log.warning("cannot check that the host reaches %s: %s", address, exc)
        return None
    with opened as sock:
        sock.setblocking(False)
        deadline = time.monotonic() + timeout
        seq = 0
        while (left := deadline - time.monotonic()) > 0:
            seq += 1
            try:
                sock.sendto(_request(ident, seq & 0xFFFF), (str(address), 0))
            except OSError as exc:  # no route yet, or the neighbour failed: ask again
                log.debug("echo to %s: %s", address, exc)
            resend = time.monotonic() + min(_RESEND, left)
            while (wait := resend - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], wait)
                if not ready:
                    break
                try:
                    packet, (source, _) = sock.recvfrom(2048)
                except BlockingIOError:
                    continue
                if _is_reply(packet, ident, source, address):
                    return True
    return False


def confirm(
    bridge: str, address: ipaddress.IPv4Address, mac: str, *, timeout: float = TIMEOUT
) -> str | None:
    """None when the host reaches ``address`` at ``mac`` through ``bridge``; else why not.

    An entry still on another MAC after the announcement (a host that ignored it) is
    deleted, so the echo asks for the address anew. Success is the host's entry on
    ``mac`` after the echo: it answered, or the host at least sends to the right veth
    (a namespace may drop ICMP and still serve its ports).
    """
    mac = mac.lower()
    entry = host_entry(bridge, address)
    if entry is not None and entry.usable and entry.mac != mac:
        log.warning("the host's entry for %s on %s is still on %s, not %s: deleting it",
                    address, bridge, entry.mac, mac)  # fmt: skip
        forget(bridge, address)
    answered = echo(address, timeout)
    entry = host_entry(bridge, address)
    if entry is not None and entry.usable and entry.mac == mac:
        return None
    if answered is None and (entry is None or entry.mac == mac):
        return None  # no echo: no entry on another MAC is all that can be seen
    seen = "none" if entry is None else f"{entry.mac or 'no MAC'} (state {entry.state:#x})"
    said = "answered" if answered else "did not answer an echo from the host"
    return f"{address} {said} and the host's neighbour entry on {bridge} is {seen}, not {mac}"


__all__ = ["TIMEOUT", "Entry", "confirm", "echo", "forget", "host_entry"]
