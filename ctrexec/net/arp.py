"""ARP frames for duplicate address detection (RFC 5227), built and read with no socket.

A probe asks "who has T?" with sender address 0.0.0.0, so no neighbour learns a
mapping from it while the answer is not known; any host that answers, or that sends
ARP from T itself, already uses T. An announcement, sent once T is ours, asks for T
with T as its sender address too: every neighbour that has an entry for T (the host
on the bridge, the other groups) replaces its MAC with ours. The socket side is
:mod:`ctrexec.net.dad`.
"""

from __future__ import annotations

import ipaddress
import struct

import attrs

ETH_P_ARP = 0x0806
_ETH_P_IP = 0x0800
_HTYPE_ETHER = 1
ARP_REQUEST = 1
ARP_REPLY = 2
BROADCAST = b"\xff" * 6
_ETH_HEADER = struct.Struct("!6s6sH")
_ARP_BODY = struct.Struct("!HHBBH6s4s6s4s")


def format_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def parse_mac(text: str) -> bytes:
    raw = bytes(int(part, 16) for part in text.split(":"))
    if len(raw) != 6:
        raise ValueError(f"not a MAC address: {text!r}")
    return raw


def probe_frame(own_mac: bytes, target: ipaddress.IPv4Address) -> bytes:
    """An Ethernet broadcast ARP request for ``target`` with sender IP 0.0.0.0."""
    return _request(own_mac, bytes(4), target)


def announcement_frame(own_mac: bytes, address: ipaddress.IPv4Address) -> bytes:
    """An RFC 5227 ARP announcement: a broadcast request for ``address`` whose sender is
    ``address`` at ``own_mac`` (Linux takes it as gratuitous and overrides its entry)."""
    return _request(own_mac, address.packed, address)


def _request(own_mac: bytes, sender_ip: bytes, target: ipaddress.IPv4Address) -> bytes:
    """A broadcast ARP request; the two kinds RFC 5227 sends differ in its sender IP."""
    header = _ETH_HEADER.pack(BROADCAST, own_mac, ETH_P_ARP)
    body = _ARP_BODY.pack(
        _HTYPE_ETHER, _ETH_P_IP, 6, 4, ARP_REQUEST, own_mac, sender_ip, bytes(6), target.packed
    )
    return header + body


@attrs.frozen
class ArpPacket:
    """The fields of an Ethernet/IPv4 ARP packet that conflict detection reads."""

    op: int
    sender_mac: bytes
    sender_ip: ipaddress.IPv4Address
    target_ip: ipaddress.IPv4Address


def parse_frame(frame: bytes) -> ArpPacket | None:
    """An Ethernet frame's ARP packet; None for anything else (short, not IPv4 ARP)."""
    size = _ETH_HEADER.size + _ARP_BODY.size
    if len(frame) < size:  # frames may carry padding after the body
        return None
    _, _, ethertype = _ETH_HEADER.unpack_from(frame)
    if ethertype != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op, sha, spa, _, tpa = _ARP_BODY.unpack_from(frame, _ETH_HEADER.size)
    if (htype, ptype, hlen, plen) != (_HTYPE_ETHER, _ETH_P_IP, 6, 4):
        return None
    return ArpPacket(op, sha, ipaddress.IPv4Address(spa), ipaddress.IPv4Address(tpa))


def conflicting_mac(
    packet: ArpPacket | None, own_mac: bytes, target: ipaddress.IPv4Address
) -> bytes | None:
    """The MAC of another host that uses ``target``, as RFC 5227 section 2.1.1 reads a
    packet received while probing: ARP from ``target`` itself, or another host's
    probe for it. Our own frames (hairpinned back by the bridge, or our own kernel
    answering its own probe) do not count."""
    if packet is None or packet.sender_mac == own_mac:
        return None
    if packet.sender_ip == target:
        return packet.sender_mac
    unspecified = ipaddress.IPv4Address(0)
    if packet.op == ARP_REQUEST and packet.sender_ip == unspecified and packet.target_ip == target:
        return packet.sender_mac
    return None


__all__ = [
    "ARP_REPLY",
    "ARP_REQUEST",
    "ETH_P_ARP",
    "ArpPacket",
    "announcement_frame",
    "conflicting_mac",
    "format_mac",
    "parse_frame",
    "parse_mac",
    "probe_frame",
]
