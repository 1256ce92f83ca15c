"""Wiring a group's network namespace: none, host, ctrexec's bridge, or a CNI network.

A group owns one pinned namespace (:mod:`ctrexec.net.netns`); this module gives it its
network through CNI (:mod:`ctrexec.net.cni`), keyed by the group name as the CNI
container id, always as ``eth0``. What the design asks of it:

- **One ADD per attachment, even across crashes.** :meth:`Networks.setup` is
  idempotent: when the CNI cache already records the attachment and it is still
  wired (:mod:`.health`: eth0 with its addresses, its veth's host end on the bridge),
  the cached attachment is returned and no plugin runs; a broken one is DELeted and
  ADDed again asking for its address back. That is how ``group up`` after a crash
  keeps its address instead of getting a second one or host-local's "duplicate
  allocation" error. When the
  record is stale (namespace gone or recreated, interface lost, ADD interrupted),
  it is DELeted before the new ADD, so nothing stays allocated.
- **Everything checkable is checked before the first change**: the mode, the
  ports, the conflist and its plugins, that the bridge subnet does not collide with
  a host route, and that no host port is already taken.
- **No state of its own.** Attachments are read back from the CNI cache; the mode
  of a cached attachment follows from its network name.

A lock file in the cache directory serialises setups and teardowns across threads
and processes: "is the port free?" and "is the group attached?" are only true
until someone else's ADD, so the check and the ADD happen under one flock.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from ctrexec import defaults
from ctrexec.errors import (
    AlreadyExists,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
)
from ctrexec.net import addrguard as _addrguard
from ctrexec.net import cni as _cni
from ctrexec.net import health as _health
from ctrexec.net import ipamstore as _ipamstore
from ctrexec.net import iptables as _iptables
from ctrexec.net import netns as _netns
from ctrexec.net import nsinfo as _nsinfo
from ctrexec.net import nsrefs as _nsrefs
from ctrexec.net import ports as _ports
from ctrexec.net import reattach as _reattach
from ctrexec.net.cni import CNI, NetworkConfigList, PortMapping
from ctrexec.net.ports import parse_port
from ctrexec.net.routes import (
    HostRoute,
    find_overlap,
    host_routes,
    parse_proc_ipv6_route,
    parse_proc_route,
)

log = logging.getLogger(__name__)

DEFAULT_NETWORK = "ctrexec"
DEFAULT_BRIDGE = "ctrexec0"
DEFAULT_SUBNET = defaults.DEFAULT_SUBNET
#: Every CNI attachment of a group is its namespace's ``eth0``.
IFNAME = "eth0"
_LOCK_NAME = ".networks.lock"
#: How long ``remove_bridge`` waits for the kernel to free removed namespaces' veths.
RELEASE_TIMEOUT = 10.0
_RELEASE_POLL = 0.05

ModeKind = Literal["none", "host", "bridge", "cni"]


# -------------------------------------------------------------------------- modes


@attrs.frozen
class NetworkMode:
    """How a group is networked; ``str()`` gives back the text :func:`parse_mode` reads."""

    kind: ModeKind
    #: The conflist name, for ``cni`` only.
    network: str | None = None

    def __str__(self) -> str:
        return f"cni:{self.network}" if self.kind == "cni" else self.kind

    @property
    def uses_cni(self) -> bool:
        return self.kind in ("bridge", "cni")


NONE = NetworkMode("none")
HOST = NetworkMode("host")
BRIDGE = NetworkMode("bridge")
#: A group with no explicit mode gets its own address on ctrexec's bridge.
DEFAULT_MODE = BRIDGE
_SIMPLE = {str(m): m for m in (NONE, HOST, BRIDGE)}


def parse_mode(text: str) -> NetworkMode:
    """``none`` | ``host`` | ``bridge`` | ``cni:NAME`` (Nomad's ``cni/NAME``).

    ``none`` is loopback only; ``host`` must be named explicitly, because it hands
    a group the host's own network; ``cni:NAME`` is a user conflist whose ``name``
    is NAME in the config dir. InvalidArgument for anything else.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"network mode must be a string, not {type(text).__name__}")
    if text in _SIMPLE:
        return _SIMPLE[text]
    kind, colon, name = text.partition(":")
    if kind == "cni" and colon:
        if not name:
            raise InvalidArgument("network mode 'cni:' needs a network name")
        _cni.validate_network_name(name)
        return NetworkMode("cni", name)
    hint = f" (did you mean 'cni:{text[4:]}'?)" if text.startswith("cni/") else ""
    raise InvalidArgument(
        f"invalid network mode {text!r}: use none, host, bridge or cni:NAME{hint}"
    )


def _as_mode(mode: NetworkMode | str) -> NetworkMode:
    return mode if isinstance(mode, NetworkMode) else parse_mode(mode)


# --------------------------------------------------------------------- attachment


@attrs.frozen
class Attachment:
    """What a group's namespace got from its network: addresses, gateway, ports.

    ``ips`` carry their prefix (``10.89.0.2/24``); none and host modes have none,
    and neither has a ``network`` or ``interface``. An attachment whose ADD was
    interrupted (still in the cache, awaiting its DEL) also has no ``ips``.
    """

    owner: str
    mode: str
    network: str | None
    netns_path: str
    ips: tuple[str, ...] = ()
    gateway: str | None = None
    ports: tuple[PortMapping, ...] = ()
    interface: str | None = None

    def addresses(self) -> list[str]:
        """Bare IPs, for /etc/hosts (:func:`ctrexec.net.hostfiles.ensure`)."""
        return [str(ipaddress.ip_interface(ip).ip) for ip in self.ips]


_result_ips = _health.result_ips


def _on_eth0(netns_path: str) -> list[str]:
    """The IPv4 addresses the namespace's eth0 has now; none if it can't be read."""
    try:
        info = _nsinfo.inspect(netns_path)
    except CtrexecError:
        return []
    return [a.address for a in info.addresses_of(IFNAME) if a.family == socket.AF_INET]


# ---------------------------------------------------------------- plugin traits


def _masquerades(conf: NetworkConfigList) -> bool:
    return any(p.get("type") == "bridge" and p.get("ipMasq") for p in conf.plugins)


def _has_portmap(conf: NetworkConfigList) -> bool:
    return any(
        p.get("type") == "portmap" and (p.get("capabilities") or {}).get("portMappings")
        for p in conf.plugins
    )


def _makes_nat(conf: NetworkConfigList) -> bool:
    """Whether the plugins leave per-attachment NAT rules (:mod:`ctrexec.net.iptables`)."""
    return _masquerades(conf) or _has_portmap(conf)


# ----------------------------------------------------------------------- networks


class Networks:
    """Attaches group namespaces to networks; one per process is enough.

    Every path and name has a default for production and an override for tests
    (their own bridge, subnet and directories). ``cni`` is the CNI runtime to use;
    without it one is built from ``conf_dir``, ``cache_dir`` and ``plugin_dirs``.
    ``routes`` returns the host's routes for the subnet check (tests inject tables).
    """

    def __init__(
        self,
        *,
        cni: CNI | None = None,
        conf_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        plugin_dirs: Sequence[str | os.PathLike[str]] | None = None,
        network: str = DEFAULT_NETWORK,
        bridge: str = DEFAULT_BRIDGE,
        subnet: str = DEFAULT_SUBNET,
        ipam_dir: str | os.PathLike[str] = _cni.DEFAULT_IPAM_DIR,
        routes: Callable[[], Sequence[HostRoute]] = host_routes,
    ) -> None:
        if cni is None:
            cni = CNI(
                plugin_dirs=_cni.DEFAULT_PLUGIN_DIRS if plugin_dirs is None else plugin_dirs,
                conf_dir=_cni.DEFAULT_CONF_DIR if conf_dir is None else conf_dir,
                cache_dir=_cni.DEFAULT_CACHE_DIR if cache_dir is None else cache_dir,
            )
        elif conf_dir is not None or cache_dir is not None or plugin_dirs is not None:
            raise InvalidArgument("give conf_dir, cache_dir and plugin_dirs to the CNI object")
        self.cni = cni
        self.bridge = _netns.validate_ifname(bridge)
        self.bridge_network = _cni.bridge_conflist(
            network, bridge, subnet, ports=True, ipam_dir=os.fspath(ipam_dir)
        )
        self.subnet = ipaddress.ip_network(subnet)  # bridge_conflist has validated it
        self.network = self.bridge_network.name
        self.ipam_dir = os.fspath(ipam_dir)
        self._routes = routes

    # ----------------------------------------------------------------- lookup

    def _user_conflist(self, mode: NetworkMode) -> NetworkConfigList | None:
        """A ``cni:NAME`` conflist from the config dir; None if there is none."""
        name = str(mode.network)
        if name == self.network:  # would share cache records with the bridge network
            raise InvalidArgument(f"cni:{name} is ctrexec's own network; use bridge")
        try:
            return self.cni.load_network(name)
        except NotFound:
            return None

    def _conflist(self, mode: NetworkMode) -> NetworkConfigList:
        if mode.kind == "bridge":
            return self.bridge_network
        conf = self._user_conflist(mode)
        if conf is None:
            raise InvalidArgument(f"no CNI network {mode.network!r} in {self.cni.conf_dir}")
        return conf

    def _mode_of(self, network: str) -> str:
        return "bridge" if network == self.network else f"cni:{network}"

    def _attachment(self, cached: _cni.CNIAttachment) -> Attachment:
        ips = _result_ips(cached)
        return Attachment(
            owner=cached.container_id,
            mode=self._mode_of(cached.network),
            network=cached.network,
            netns_path=cached.netns,
            ips=tuple(i.address for i in ips),
            gateway=next((i.gateway for i in ips if i.gateway), None),
            ports=_ports.ports_of(cached),
            interface=cached.ifname,
        )

    def _cached(self, network: str, owner: str) -> tuple[_cni.CNIAttachment | None, bool]:
        """The cached ADD and whether there is a record at all (it may be unreadable)."""
        try:
            return self.cni.attachment(network, owner, IFNAME), False
        except NetworkError as exc:
            log.warning("%s; it will be deleted", exc)
            return None, True

    def network_of(self, mode: NetworkMode | str) -> str | None:
        """The CNI network ``mode`` attaches to; None for none and host."""
        mode = _as_mode(mode)
        if not mode.uses_cni:
            return None
        return self.network if mode.kind == "bridge" else str(mode.network)

    @property
    def ifname(self) -> str:
        """The group's interface in its namespace (:data:`IFNAME`), for :mod:`.health`."""
        return IFNAME

    def bridge_of(self, mode: NetworkMode | str) -> str | None:
        """The bridge ``mode``'s network puts host ends on; None without one (or no
        network). InvalidArgument for a ``cni:NAME`` whose conflist is gone."""
        mode = _as_mode(mode)
        if not mode.uses_cni:
            return None
        return _health.bridge_in(self._conflist(mode).plugins)

    def record(self, owner: str, mode: NetworkMode | str) -> _cni.CNIAttachment | None:
        """A group's cached ADD (config, result) in ``mode``'s network; None if none."""
        _cni.validate_container_id(owner)
        name = self.network_of(mode)
        return None if name is None else self._cached(name, owner)[0]

    def attachment(self, owner: str, mode: NetworkMode | str) -> Attachment | None:
        """A group's cached attachment in ``mode``'s network; None if not attached."""
        cached = self.record(owner, mode)
        return None if cached is None else self._attachment(cached)

    def attachments(self) -> list[Attachment]:
        """Every cached attachment, whatever its network (recovery, gc, port checks)."""
        return [self._attachment(a) for a in self.cni.attachments() if a.ifname == IFNAME]

    # ------------------------------------------------------------------ checks

    def check_subnet(self) -> None:
        """InvalidArgument if the bridge subnet overlaps a host route not its own."""
        clash = find_overlap(self.subnet, self._routes(), self.bridge)
        if clash is not None:
            raise InvalidArgument(
                f"subnet {self.subnet} overlaps host route {clash.dst} via {clash.ifname}"
            )

    def _check_ports(self, network: str, owner: str, ports: Sequence[PortMapping]) -> None:
        if not ports:
            return
        others = [
            m
            for m in _ports.mapped_ports(self.cni.attachments())
            if (m.network, m.owner, m.ifname) != (network, owner, IFNAME)
        ]
        _ports.check_taken(ports, others)
        _ports.check_host_free(ports)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise attach/detach across threads and processes (flock per open file)."""
        directory = self.cni.cache_dir
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise NetworkError(f"cannot lock {directory}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- actions

    def _delete(
        self,
        conf: NetworkConfigList,
        owner: str,
        cached: _cni.CNIAttachment | None,
        netns_path: str | None,
        ports: Sequence[PortMapping] = (),
    ) -> None:
        """CNI DEL, then the NAT rules the plugins could not find themselves.

        Without the cached ADD, the DEL is rebuilt from ``conf`` and ``ports`` (what
        the records say). The bridge plugin learns which rules to remove from the
        namespace's ``eth0``; portmap from the cached ports: whatever they missed is
        found by chain name and comment (:mod:`ctrexec.net.iptables`). A DEL failing
        on a chain still referenced by a stale rule ("resource busy") is tried once
        more after those rules are gone.
        """
        if cached is not None and netns_path is not None:
            cached = attrs.evolve(cached, netns=netns_path)
        network: str | NetworkConfigList = conf if cached is None else conf.name
        nat = _makes_nat(conf if cached is None else cached.config) and self.cni.verify_netns
        given = () if cached is not None else tuple(ports)
        try:
            self.cni.delete(network, owner, netns_path, IFNAME, port_mappings=given)
        except NetworkError as exc:
            if not nat:
                raise
            log.info("DEL of %s from %s failed (%s); clearing its NAT rules first",
                     owner, conf.name, exc)  # fmt: skip
            _iptables.remove_attachment(conf.name, owner)
            self.cni.delete(network, owner, netns_path, IFNAME, port_mappings=given)
        if nat:
            _iptables.remove_attachment(conf.name, owner)

    def _release(
        self,
        conf: NetworkConfigList,
        owner: str,
        cached: _cni.CNIAttachment | None,
        unreadable: bool,
        health: _health.Health | None,
    ) -> list[str]:
        """DEL a stale or broken record before its ADD; the addresses to ask back."""
        keep: list[str] = []
        if health is not None:
            why = "; ".join(health.problems)
            log.warning("%s is not attached to %s (%s): re-attaching it", owner, conf.name, why)
            if cached is not None and health.own:
                keep = _health.addresses(cached)
        elif cached is not None or unreadable:
            log.info("re-attaching %s to %s: its cached attachment is stale", owner, conf.name)
        if cached is not None or unreadable:
            self._delete(conf, owner, cached, None)
        return keep

    def setup(
        self,
        owner: str,
        netns_path: str,
        mode: NetworkMode | str = DEFAULT_MODE,
        ports: Sequence[PortMapping] = (),
        *,
        prefer: Sequence[str] = (),
        held: Mapping[str, str] | None = None,
    ) -> Attachment:
        """Attach ``owner``'s namespace as ``eth0``; idempotent and crash-safe.

        Returns the existing attachment, with no plugin run, while it is sound (see
        :mod:`.health`); a stale or broken one is DELeted, and the ADD asks for its
        address back, else for ``prefer``'s first (:mod:`.reattach`).
        Refuses, before any change: ports outside bridge/cni modes or without a
        portmap plugin, a missing conflist or plugin, a subnet that collides with a
        host route (InvalidArgument), a host port already published by another
        group or busy on the host (AlreadyExists), and a change of ports on a live
        attachment (FailedPrecondition: tear it down first). Never hands out a live
        group's address, nor one of ``held`` (address -> holder, from records)."""
        mode = _as_mode(mode)
        _cni.validate_container_id(owner)
        ports = tuple(ports)
        _ports.check_unique(ports)
        if not mode.uses_cni:
            if ports:
                raise InvalidArgument(f"ports need network mode bridge or cni:NAME, not {mode}")
            if mode.kind == "none" and self.cni.verify_netns:
                _netns.verify(netns_path)
            return Attachment(owner=owner, mode=str(mode), network=None, netns_path=netns_path)
        conf = self._conflist(mode)
        if ports and not _has_portmap(conf):
            raise InvalidArgument(f"network {conf.name} has no portmap plugin to publish ports")
        if self.cni.verify_netns:
            _netns.verify(netns_path)
        self.cni.validate(conf)
        with self._locked():
            cached, unreadable = self._cached(conf.name, owner)
            ours = cached is not None and cached.result is not None and cached.netns == netns_path
            health = _health.assess(cached) if ours and cached is not None else None
            if cached is not None and health is not None and not health.problems:
                _reattach.check_same_ports(cached, ports)
                return self._attachment(cached)
            if mode.kind == "bridge":
                self.check_subnet()
            self._check_ports(conf.name, owner, ports)
            keep = self._release(conf, owner, cached, unreadable, health)
            fresh = cached is None and not unreadable
            want = [*keep, *prefer]
            added = self._add(conf, owner, netns_path, ports, held, fresh=fresh, prefer=want)
        return self._attachment(added)

    def _add(
        self,
        conf: NetworkConfigList,
        owner: str,
        netns_path: str,
        ports: Sequence[PortMapping],
        held: Mapping[str, str] | None,
        *,
        fresh: bool,
        prefer: Sequence[str],
    ) -> _cni.CNIAttachment:
        """The ADD, with what keeps its address one group's (issue 20) around it;
        ``fresh``: the cache has no record of ``owner`` at all, so the address still on
        the namespace's eth0 (the DEL rebuilt before the ADD removes it) is asked back."""
        if fresh and self.cni.verify_netns:
            prefer = [*_on_eth0(netns_path), *prefer]
        self._before_add(conf, owner, netns_path, ports, held or {}, fresh=fresh)
        _reattach.add(self.cni, conf, owner, netns_path, ifname=IFNAME, ports=ports, prefer=prefer)
        added = self.cni.attachment(conf.name, owner, IFNAME)
        if added is None:  # pragma: no cover - add() wrote it under our lock
            raise NetworkError(f"the CNI cache lost the attachment of {owner}")
        self._after_add(conf, owner, added)
        return added

    def _before_add(
        self,
        conf: NetworkConfigList,
        owner: str,
        netns_path: str,
        ports: Sequence[PortMapping],
        held: Mapping[str, str],
        *,
        fresh: bool,
    ) -> None:
        """Clear what a lost cache left of ``owner`` (a DEL rebuilt from ``conf``:
        stale DNAT and masquerade rules would come first) and of gone holders of
        ``ports``, refuse ports a live group's rules publish, then reconcile IPAM."""
        if not self.cni.verify_netns:  # a test's stand-in CNI: no host to look at
            return
        if fresh:
            try:
                self._delete(conf, owner, None, netns_path, ports)
            except NetworkError as exc:
                log.warning("clearing what %s left on %s failed: %s", owner, conf.name, exc)
        _addrguard.clear_port_holders(conf.name, owner, ports)
        _addrguard.reconcile(conf, owner, IFNAME, held)

    def _after_add(self, conf: NetworkConfigList, owner: str, added: _cni.CNIAttachment) -> None:
        """Duplicate address detection (a conflict undoes the ADD and is raised), then the
        announcement of the address that a re-made veth needs."""
        if not self.cni.verify_netns:
            return
        ips = [i.address for i in _result_ips(added)]
        try:
            message = _addrguard.conflict(added.netns, IFNAME, owner, ips)
        except NetworkError as exc:
            if conf.name != self.network:  # a user network's link may not speak ARP
                log.warning("no duplicate address check for %s: %s", owner, exc)
                return
            self._delete(conf, owner, added, None)
            raise
        if message is not None:
            self._delete(conf, owner, added, None)
            raise AlreadyExists(message)
        self._announce(conf, owner, added, ips)

    def _announce(
        self, conf: NetworkConfigList, owner: str, added: _cni.CNIAttachment, ips: list[str]
    ) -> None:
        """Announce the address, see the host reach it (:func:`.addrguard.announce`); on
        our bridge a failure undoes the ADD and is raised (a user network's link may not
        speak ARP or have a host route: a warning)."""
        try:
            why = _addrguard.announce(added.netns, IFNAME, ips, _health.bridge_of(added))
        except CtrexecError as exc:
            why = str(exc)
        if why is None:
            return
        if conf.name != self.network:
            log.warning("%s is attached to %s, but %s", owner, conf.name, why)
            return
        self._delete(conf, owner, added, None)
        raise NetworkError(f"{owner} was attached to {conf.name}, but {why}; undone")

    def teardown(
        self,
        owner: str,
        netns_path: str | None,
        mode: NetworkMode | str = DEFAULT_MODE,
        *,
        ports: Sequence[PortMapping] = (),
        addresses: Sequence[str] = (),
    ) -> None:
        """Detach ``owner``; idempotent, and fine once the namespace is gone.

        Call it *before* removing the namespace: the bridge plugin then finds the
        addresses to un-masquerade itself; what it cannot find is removed by name
        and comment. ``netns_path`` None means the path the ADD was given. When the
        cache has lost the ADD, the DEL is rebuilt from the conflist, ``ports`` and
        ``addresses`` (the records' labels): reservations of those addresses that
        name ``owner`` go too.
        """
        mode = _as_mode(mode)
        _cni.validate_container_id(owner)
        if not mode.uses_cni:
            return
        conf = self.bridge_network if mode.kind == "bridge" else self._user_conflist(mode)
        if conf is None:
            # The conflist is gone; the cached ADD (if any) still carries it.
            cached, _ = self._cached(str(mode.network), owner)
            if cached is None:
                return
            conf = cached.config
        with self._locked():
            cached, _ = self._cached(conf.name, owner)
            self._delete(conf, owner, cached, netns_path, ports)
            for pool in _ipamstore.host_local_pools(conf.name, conf.plugins):
                _ipamstore.release_own(pool, addresses, owner)

    def remove_bridge(self, *, timeout: float = RELEASE_TIMEOUT) -> bool:
        """Delete the shared bridge if no interface is attached; True if it was there.

        Not part of a group's teardown -- the bridge is shared, like docker0 -- but
        for ``network prune``, tests and uninstall. The kernel frees a removed
        namespace asynchronously, so the host end of its veth can hang on the bridge
        for a while after ``group down`` or ``netns rm`` returned; such ports (see
        :mod:`ctrexec.net.nsrefs`) are waited for, up to ``timeout`` seconds. A port
        whose namespace is still pinned is refused at once (FailedPrecondition), as
        is a port still there when the wait runs out. The route and per-interface
        sysctls go with the link; portmap's CNI-HOSTPORT-* chains are shared by
        every CNI network on the host and are left alone.
        """
        deadline = time.monotonic() + timeout
        with _netns.netlink("/proc/self/ns/net", allow_host=True) as ipr:
            while True:
                links = list(ipr.link("dump"))
                bridge = self._own_bridge(links)
                if bridge is None:
                    return False
                ports = [m for m in links if m.get_attr("IFLA_MASTER") == bridge["index"]]
                if not ports:
                    ipr.link("del", index=bridge["index"])
                    return True
                in_use, going = _nsrefs.split_ports(ipr, ports)
                if in_use:
                    raise FailedPrecondition(
                        f"bridge {self.bridge} still has interfaces attached: {', '.join(in_use)}"
                    )
                if time.monotonic() >= deadline:
                    raise FailedPrecondition(
                        f"bridge {self.bridge} still has interfaces attached: {', '.join(going)}"
                        f" (their namespace is gone, not yet freed after {timeout:g}s)"
                    )
                time.sleep(_RELEASE_POLL)

    def _own_bridge(self, links: Sequence[Any]) -> Any:
        """The bridge's link message from a dump; None if absent; refuses a non-bridge."""
        found = [m for m in links if m.get_attr("IFLA_IFNAME") == self.bridge]
        if not found:
            return None
        info = found[0].get_attr("IFLA_LINKINFO")
        if info is None or info.get_attr("IFLA_INFO_KIND") != "bridge":
            raise FailedPrecondition(f"{self.bridge} is not a bridge; leaving it alone")
        return found[0]


__all__ = [
    "BRIDGE",
    "DEFAULT_BRIDGE",
    "DEFAULT_MODE",
    "DEFAULT_NETWORK",
    "DEFAULT_SUBNET",
    "HOST",
    "IFNAME",
    "NONE",
    "RELEASE_TIMEOUT",
    "Attachment",
    "HostRoute",
    "NetworkMode",
    "Networks",
    "find_overlap",
    "host_routes",
    "parse_mode",
    "parse_port",
    "parse_proc_ipv6_route",
    "parse_proc_route",
]
