"""Published ports: parse ``[IP:]HOST:CONTAINER[/PROTO]`` and refuse taken host ports.

A published port is an iptables DNAT rule that CNI's portmap plugin writes; no
process holds the host port. So nothing in the kernel stops two groups from
publishing the same host port -- the second rule would silently shadow the first
-- or a group from hiding a host service that listens on it. Both are checked
here before an ADD:

- :func:`check_taken` against the port mappings of every cached CNI attachment
  (the cache is ctrexec's record of what portmap was asked to do; a record left
  by an interrupted ADD counts too, since its rules may exist);
- :func:`check_host_free` by binding a socket to the port for a moment.

The value type is :class:`ctrexec.net.cni.PortMapping` (what portmap receives as its
``portMappings`` capability), so nothing is translated twice.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from ctrexec.errors import AlreadyExists, InvalidArgument, NetworkError
from ctrexec.net import cni
from ctrexec.net.cni import PortMapping

#: What ``parse_port`` accepts after the "/". portmap also knows sctp, but a busy
#: sctp port cannot be probed portably, so ctrexec does not offer it.
PROTOCOLS = ("tcp", "udp")

_PORT_RE = re.compile(r"[0-9]{1,5}")


def _port(text: str, spec: str) -> int:
    if not _PORT_RE.fullmatch(text) or not 0 < int(text) < 65536:
        raise InvalidArgument(f"invalid port mapping {spec!r}: ports must be 1..65535")
    return int(text)


def _host_ip(text: str, spec: str) -> str:
    if not text:
        return ""
    try:
        return str(ipaddress.ip_address(text))  # canonical, so equal IPs compare equal
    except ValueError as exc:
        raise InvalidArgument(f"invalid port mapping {spec!r}: bad host IP {text!r}") from exc


def parse_port(text: str) -> PortMapping:
    """``HOST:CONTAINER[/tcp|udp]`` or ``IP:HOST:CONTAINER[/proto]`` (``[v6]:H:C``).

    Like ``docker run -p`` minus ranges and the container-port-only form: a
    published port must name its host port, so that restarts republish the same
    one. InvalidArgument for anything else.
    """
    if not isinstance(text, str) or not text or text != text.strip():
        raise InvalidArgument(f"invalid port mapping {text!r}")
    spec, slash, proto = text.partition("/")
    if slash and proto not in PROTOCOLS:
        raise InvalidArgument(
            f"invalid port mapping {text!r}: protocol must be one of {', '.join(PROTOCOLS)}"
        )
    if spec.startswith("["):
        address, bracket, rest = spec[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise InvalidArgument(f"invalid port mapping {text!r}: expected [IPv6]:HOST:CONTAINER")
        host_ip, parts = address, rest[1:].split(":")
    else:
        parts = spec.split(":")
        host_ip = parts.pop(0) if len(parts) == 3 else ""
    if len(parts) != 2:
        hint = " (put an IPv6 address in brackets)" if len(parts) > 3 else ""
        raise InvalidArgument(
            f"invalid port mapping {text!r}: expected [IP:]HOST:CONTAINER[/PROTO]{hint}"
        )
    return PortMapping(
        host_port=_port(parts[0], text),
        container_port=_port(parts[1], text),
        protocol=proto or "tcp",
        host_ip=_host_ip(host_ip, text),
    )


def expand_publish(text: str, pick: Callable[[str, str], int] | None = None) -> list[str]:
    """docker's other ``-p`` forms as the ``HOST:CONTAINER`` mappings parse_port reads.

    A range (``8000-8001:80-81``) gives one mapping per port; a missing host port
    (``80``, ``IP::80``) is picked now (``pick(host_ip, proto)``, by default a port
    the kernel hands out as free), and named from then on, so a restart republishes
    the same one. Anything else comes back unchanged for parse_port to judge.
    """
    spec, slash, proto = text.partition("/")
    if spec.startswith("["):
        address, bracket, rest = spec[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            return [text]
        host_ip, prefix, parts = address, f"[{address}]:", rest[1:].split(":")
    else:
        parts = spec.split(":")
        host_ip = parts.pop(0) if len(parts) == 3 else ""
        prefix = f"{host_ip}:" if len(spec.split(":")) == 3 else ""
    if len(parts) == 1:
        parts = ["", parts[0]]
    if len(parts) != 2:
        return [text]
    wanted = _port_range(parts[1], text)
    hosts = _port_range(parts[0], text) if parts[0] else None
    if hosts is not None and len(hosts) != len(wanted):
        raise InvalidArgument(
            f"invalid port mapping {text!r}: the host and container ranges differ in size"
        )
    if hosts is None:
        hosts = _picked(len(wanted), host_ip, proto or "tcp", pick or free_host_port)
    return [f"{prefix}{h}:{port}{slash}{proto}" for h, port in zip(hosts, wanted, strict=True)]


def _picked(count: int, host_ip: str, proto: str, pick: Callable[[str, str], int]) -> list[int]:
    """``count`` different host ports (the kernel may hand the same one out twice)."""
    chosen: list[int] = []
    for _ in range(count * 20):
        if len(chosen) == count:
            break
        port = pick(host_ip, proto)
        if port not in chosen:
            chosen.append(port)
    if len(chosen) < count:
        raise InvalidArgument(f"cannot pick {count} free host ports on {host_ip or 'the host'}")
    return chosen


def _port_range(text: str, spec: str) -> list[int]:
    first, dash, last = text.partition("-")
    low = _port(first, spec)
    high = _port(last, spec) if dash else low
    if high < low:
        raise InvalidArgument(f"invalid port mapping {spec!r}: range {text} ends before it starts")
    return list(range(low, high + 1))


def free_host_port(host_ip: str, proto: str) -> int:
    """A port the kernel deems free on ``host_ip`` (all addresses if empty), as docker
    picks one for ``-p 80``; the check before the ADD still guards the moment after."""
    family = socket.AF_INET6 if ":" in host_ip else socket.AF_INET
    kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
    with socket.socket(family, kind) as sock:
        sock.bind((host_ip, 0))  # "" is every address of the family
        return int(sock.getsockname()[1])


def describe(mapping: PortMapping) -> str:
    """How messages name a host port: ``8080/tcp`` or ``127.0.0.1:8080/tcp``."""
    where = mapping.host_ip
    if ":" in where:
        where = f"[{where}]"
    prefix = f"{where}:" if where else ""
    return f"{prefix}{mapping.host_port}/{mapping.protocol}"


def _family(host_ip: str) -> int | None:
    """4 or 6 for a specific family; None when the mapping covers both ("")."""
    return ipaddress.ip_address(host_ip).version if host_ip else None


def _is_wildcard(host_ip: str) -> bool:
    return not host_ip or ipaddress.ip_address(host_ip).is_unspecified


def overlaps(a: PortMapping, b: PortMapping) -> bool:
    """Whether two mappings would DNAT some of the same packets.

    Same protocol and host port, and host IPs that can meet: equal, or one a
    wildcard ("" for every address, 0.0.0.0 / :: for every address of a family).
    """
    if a.protocol != b.protocol or a.host_port != b.host_port:
        return False
    fa, fb = _family(a.host_ip), _family(b.host_ip)
    if fa is not None and fb is not None and fa != fb:
        return False
    return a.host_ip == b.host_ip or _is_wildcard(a.host_ip) or _is_wildcard(b.host_ip)


def check_unique(ports: Sequence[PortMapping]) -> None:
    """One request must not publish the same host port twice."""
    for i, mapping in enumerate(ports):
        if not isinstance(mapping, PortMapping):
            raise InvalidArgument(f"not a port mapping: {mapping!r}")
        for other in ports[:i]:
            if overlaps(mapping, other):
                raise InvalidArgument(f"port {describe(mapping)} is given twice")


@attrs.frozen
class MappedPort:
    """A host port that a cached attachment published, and whose it is."""

    owner: str
    network: str
    ifname: str
    mapping: PortMapping


def _mappings_of(raw: object) -> list[PortMapping]:
    """portmap's ``portMappings`` as cached; entries that do not parse are skipped."""
    out = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        with contextlib.suppress(InvalidArgument, KeyError, TypeError):
            out.append(
                PortMapping(
                    host_port=item["hostPort"],
                    container_port=item["containerPort"],
                    protocol=item.get("protocol") or "tcp",
                    host_ip=item.get("hostIP") or "",
                )
            )
    return out


def ports_of(attachment: cni.CNIAttachment) -> tuple[PortMapping, ...]:
    """The port mappings an attachment's ADD was given."""
    caps: Any = attachment.capability_args
    return tuple(_mappings_of(caps.get("portMappings")))


def mapped_ports(attachments: Iterable[cni.CNIAttachment]) -> list[MappedPort]:
    """Every host port published by these cached attachments."""
    return [
        MappedPort(owner=a.container_id, network=a.network, ifname=a.ifname, mapping=m)
        for a in attachments
        for m in ports_of(a)
    ]


def check_taken(wanted: Sequence[PortMapping], taken: Iterable[MappedPort]) -> None:
    """AlreadyExists if another attachment already publishes one of ``wanted``.

    The caller leaves its own attachment out of ``taken``: re-attaching a group
    republishes its own ports.
    """
    taken = list(taken)
    for mapping in wanted:
        for other in taken:
            if overlaps(mapping, other.mapping):
                raise AlreadyExists(
                    f"port {describe(mapping)} is already mapped by group {other.owner}"
                )


def _probe_addresses(mapping: PortMapping) -> list[tuple[int, str]]:
    if not _is_wildcard(mapping.host_ip):
        family = _family(mapping.host_ip)
        return [(socket.AF_INET6 if family == 6 else socket.AF_INET, mapping.host_ip)]
    out: list[tuple[int, str]] = []
    if _family(mapping.host_ip) in (None, 4):
        out += [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1")]  # noqa: S104
    if _family(mapping.host_ip) in (None, 6) and socket.has_ipv6:
        out.append((socket.AF_INET6, "::"))
    return out


def _busy(family: int, address: str, mapping: PortMapping) -> bool:
    kind = socket.SOCK_STREAM if mapping.protocol == "tcp" else socket.SOCK_DGRAM
    try:
        sock = socket.socket(family, kind)
    except OSError as exc:
        if exc.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
            return False  # no IPv6 on this host: nothing can listen there either
        raise
    with sock:
        if kind == socket.SOCK_STREAM:
            # Lets the bind ignore TIME_WAIT leftovers, yet Linux still refuses it
            # when anything listens on the port. Not for UDP, where it would share.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((address, mapping.host_port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if exc.errno == errno.EADDRNOTAVAIL:
                return False  # the IP is not ours; the DNAT rule hides nothing here
            raise
    return False


def check_host_free(wanted: Sequence[PortMapping]) -> None:
    """AlreadyExists if a host socket holds one of ``wanted``; the probe closes at once.

    A DNAT rule would steal that service's traffic (or, for 127.0.0.1, the other
    way round), so the clash is reported rather than created.
    """
    for mapping in wanted:
        for family, address in _probe_addresses(mapping):
            try:
                busy = _busy(family, address, mapping)
            except OSError as exc:
                raise NetworkError(f"cannot probe port {describe(mapping)}: {exc}") from exc
            if busy:
                raise AlreadyExists(f"port {describe(mapping)} is in use on the host")


__all__ = [
    "PROTOCOLS",
    "MappedPort",
    "PortMapping",
    "check_host_free",
    "check_taken",
    "check_unique",
    "describe",
    "mapped_ports",
    "overlaps",
    "parse_port",
    "ports_of",
]
