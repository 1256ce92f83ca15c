"""Duplicate address detection: an RFC 5227 ARP probe from inside a group's namespace.

Reconciling host-local's store (:mod:`ctrexec.net.ipamstore`) covers the holders
ctrexec can see; this covers the rest (an address set by hand, another tool's
namespace on the same bridge). After the ADD and before any task starts, the new
address is probed for on the group's own ``eth0``; a reply from another MAC is a
conflict. The frames only ever leave through that interface, onto the group's
bridge. RFC 5227 sends 3 probes 1-2 s apart and waits 2 s more; on a local bridge
an answer takes microseconds, so the timing is scaled down to a fifth of a second.

Once the address is the group's, :func:`announce` sends RFC 5227's two announcements
(2 s apart there, scaled down the same way): a re-made veth has a new MAC, and the
host's neighbour entry for the address would otherwise stay on the old one (REACHABLE,
so unasked for up to ~30 s) while the published port is dead.
"""

from __future__ import annotations

import contextlib
import ipaddress
import select
import socket
import time
from collections.abc import Iterator

from ctrexec.errors import NetworkError
from ctrexec.net import arp, netns

PROBES = 3
PROBE_INTERVAL = 0.05
#: How long replies are waited for after the last probe.
ANSWER_WAIT = 0.1
_PACKET_OUTGOING = 4
#: RFC 5227's ANNOUNCE_NUM, and its ANNOUNCE_INTERVAL scaled down as the probes'.
ANNOUNCEMENTS = 2
ANNOUNCE_INTERVAL = 0.05
#: How many queued frames are still read once the wait is over.
_LATE_FRAMES = 256


def _open(ifname: str) -> socket.socket:
    """An ARP packet socket bound to ``ifname`` of the calling thread's namespace."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(arp.ETH_P_ARP))
    try:
        sock.bind((ifname, arp.ETH_P_ARP))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.contextmanager
def _link(netns_path: str, ifname: str, doing: str) -> Iterator[socket.socket]:
    """The namespace's ARP socket on ``ifname`` for one act (``doing``: "probe for
    10.0.0.2", say); any failure, opening or using it, is a NetworkError that says so."""
    try:
        sock = netns.run_inside(netns_path, lambda: _open(ifname), doing=f"{doing} from")
    except OSError as exc:
        raise NetworkError(f"cannot {doing} on {ifname}: {exc.strerror}") from exc
    try:
        yield sock
    except OSError as exc:
        raise NetworkError(f"{doing} on {ifname} failed: {exc}") from exc
    finally:
        sock.close()


def probe(netns_path: str, ifname: str, address: ipaddress.IPv4Address) -> str | None:
    """The MAC of another holder of ``address`` on ``ifname``'s link; None if none answered.

    NetworkError if the probe cannot be sent (no such interface, no permission).
    """
    with _link(netns_path, ifname, f"probe for {address}") as sock:
        own = sock.getsockname()[4]
        frame = arp.probe_frame(own, address)
        for n in range(PROBES):
            sock.send(frame)
            wait = PROBE_INTERVAL if n + 1 < PROBES else ANSWER_WAIT
            found = _listen(sock, own, address, time.monotonic() + wait)
            if found is not None:
                return arp.format_mac(found)
        return None


def announce(netns_path: str, ifname: str, address: ipaddress.IPv4Address) -> str:
    """Announce ``address`` on ``ifname``'s link from inside the namespace; its MAC.

    NetworkError if the announcement cannot be sent.
    """
    with _link(netns_path, ifname, f"announce {address}") as sock:
        own = sock.getsockname()[4]
        frame = arp.announcement_frame(own, address)
        for n in range(ANNOUNCEMENTS):
            if n:
                time.sleep(ANNOUNCE_INTERVAL)
            sock.send(frame)
        return arp.format_mac(own)


def _listen(
    sock: socket.socket, own: bytes, address: ipaddress.IPv4Address, deadline: float
) -> bytes | None:
    late = 0
    while late < _LATE_FRAMES:
        # Polled on past the deadline while frames are queued: a reply that came while
        # this process was not scheduled (a busy host) still counts; a bounded number,
        # so a chatty bridge cannot keep the probe going.
        left = deadline - time.monotonic()
        late += left <= 0
        ready, _, _ = select.select([sock], [], [], max(0.0, left))
        if not ready:
            return None
        try:
            frame, where = sock.recvfrom(2048)
        except BlockingIOError:
            continue
        if where[2] == _PACKET_OUTGOING:
            continue
        found = arp.conflicting_mac(arp.parse_frame(frame), own, address)
        if found is not None:
            return found
    return None


def conflict_message(address: str, group: str, holder: str | None, mac: str) -> str:
    """The one line a conflict is reported with, naming both holders."""
    other = f"group {holder} (MAC {mac})" if holder else f"MAC {mac}, not a ctrexec group"
    return f"address conflict: {address} given to group {group} is already held by {other}"


__all__ = [
    "ANNOUNCEMENTS",
    "ANNOUNCE_INTERVAL",
    "ANSWER_WAIT",
    "PROBES",
    "PROBE_INTERVAL",
    "announce",
    "conflict_message",
    "probe",
]
