"""The CNI exec protocol: run plugin binaries on a network namespace.

Implements the runtime side of the CNI spec (0.3.0, 0.3.1, 0.4.0, 1.0.0): a plugin
is an executable named by a plugin config's ``type``, found in the plugin dirs,
given its parameters in ``CNI_*`` variables and its config JSON on stdin, answering
a result or an error ``{code, msg, details}`` on stdout.

Choices that matter for ctrexec's reliability goals:

- Everything that can be checked is checked before the first ADD: the conflist,
  the container id and interface name, the namespace (never the host's), that
  every plugin binary (and IPAM binary) is installed and supports the cniVersion.
- One ADD per attachment ``(network, container id, ifname)``: the ADD result and
  the exact config are cached under /run (a reboot clears it, as it clears the
  namespaces). A second ADD is refused (AlreadyExists) instead of tripping
  host-local's "duplicate allocation". DEL replays the cached config and result,
  so it works even if the conflist changed, and it is idempotent: no cache, a
  vanished namespace (CNI_NETNS is then passed empty) or a second call all succeed.
- A failed ADD is rolled back with a best-effort DEL, as the spec requires every
  ADD to be followed by a DEL, so no IP stays allocated. The cache record is
  written *before* the first ADD, so even a process killed mid-ADD leaves DEL the
  config and capability args it needs (portmap's DEL is a no-op without them).
- Known limits of containernetworking-plugins 1.1.1 (Debian 12): the bridge
  plugin finds the addresses to un-masquerade on the container interface, so DEL
  an attachment *before* removing its namespace or its ipMasq rule stays; and
  portmap's CHECK fails on IPv4-only attachments (containernetworking/plugins#819).
- Plugins run with :mod:`subprocess`. On Linux CPython 3.11 that is vfork+exec
  (no ``preexec_fn``), which runs no fork handlers -- neither Python's nor gRPC's --
  and copies no address space. ``close_fds`` keeps gRPC and netlink sockets out of
  plugins; each plugin gets its own session so a timeout kills its helpers too.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import logging
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctrexec import netns as _netns
from ctrexec.errors import (
    AlreadyExists,
    CNIError,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
)

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0")
DEFAULT_PLUGIN_DIRS = ("/opt/cni/bin", "/usr/lib/cni")
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = "/run/ctrexec/cni/results"
#: host-local's state; under /run so a reboot (which also drops every namespace)
#: cannot leave addresses allocated to containers that no longer exist.
DEFAULT_IPAM_DIR = "/run/ctrexec/cni/ipam"
DEFAULT_TIMEOUT = 60.0

#: Well-known error codes from the spec; 100+ are plugin-specific.
ERROR_CODES = {
    1: "incompatible CNI version",
    2: "unsupported field in network configuration",
    3: "container unknown or does not exist",
    4: "invalid necessary environment variables",
    5: "I/O failure",
    6: "failed to decode content",
    7: "invalid network config",
    11: "try again later",
}

_CACHE_KIND = "ctrexec/cni-attachment/v1"
# Network names (CNI 1.0), container ids (the spec's rule) and plugin types: the
# last becomes an executable name, so "/" and ".." must be impossible.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_ARG_KEY_RE = re.compile(r"^[A-Za-z0-9_]+$")
_STDERR_TAIL = 2000

JSONDict = dict[str, Any]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _is_040_or_later(version: str) -> bool:
    """prevResult on DEL and the CHECK command arrived with spec 0.4.0."""
    return _version_key(version) >= (0, 4, 0)


# ------------------------------------------------------------------ value types


@attrs.frozen
class NetworkConfigList:
    """A validated conflist. ``raw`` is the JSON as loaded (plugins included)."""

    name: str
    cni_version: str
    plugins: tuple[Mapping[str, Any], ...]
    disable_check: bool
    raw: Mapping[str, Any]

    def to_json(self) -> JSONDict:
        return copy.deepcopy(dict(self.raw))


@attrs.frozen
class CNIInterface:
    name: str
    mac: str | None = None
    sandbox: str | None = None


@attrs.frozen
class CNIIPConfig:
    """One assigned address; ``interface`` indexes :attr:`CNIResult.interfaces`."""

    address: str
    version: int
    gateway: str | None = None
    interface: int | None = None

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_interface(self.address).network.prefixlen


@attrs.frozen
class CNIRoute:
    dst: str
    gw: str | None = None


@attrs.frozen
class CNIDNS:
    nameservers: tuple[str, ...] = ()
    domain: str | None = None
    search: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@attrs.frozen
class CNIResult:
    """A parsed ADD result; ``raw`` is kept verbatim to pass back as prevResult."""

    cni_version: str
    interfaces: tuple[CNIInterface, ...]
    ips: tuple[CNIIPConfig, ...]
    routes: tuple[CNIRoute, ...]
    dns: CNIDNS
    raw: Mapping[str, Any] = attrs.field(eq=False, repr=False)

    def to_json(self) -> JSONDict:
        return copy.deepcopy(dict(self.raw))

    def container_ips(self, ifname: str | None = None) -> tuple[CNIIPConfig, ...]:
        """Addresses on interfaces inside a sandbox (optionally one interface)."""
        out = []
        for ipc in self.ips:
            if ipc.interface is None:
                continue
            iface = self.interfaces[ipc.interface]
            if iface.sandbox and (ifname is None or iface.name == ifname):
                out.append(ipc)
        return tuple(out)


@attrs.frozen
class PortMapping:
    """One ``portMappings`` capability entry (the portmap plugin's runtimeConfig)."""

    host_port: int
    container_port: int
    protocol: str = "tcp"
    host_ip: str = ""

    def __attrs_post_init__(self) -> None:
        for port in (self.host_port, self.container_port):
            if not isinstance(port, int) or not 0 < port < 65536:
                raise InvalidArgument(f"invalid port {port!r}")
        if self.protocol not in ("tcp", "udp", "sctp"):
            raise InvalidArgument(f"invalid protocol {self.protocol!r}")
        if self.host_ip:
            try:
                ipaddress.ip_address(self.host_ip)
            except ValueError as exc:
                raise InvalidArgument(f"invalid host IP {self.host_ip!r}") from exc

    def to_json(self) -> JSONDict:
        out: JSONDict = {
            "hostPort": self.host_port,
            "containerPort": self.container_port,
            "protocol": self.protocol,
        }
        if self.host_ip:
            out["hostIP"] = self.host_ip
        return out


@attrs.frozen
class Attachment:
    """A cached ADD: enough to CHECK and DEL later, and to recover the addresses.

    ``result`` is None while the ADD runs -- and forever if the process died
    mid-ADD: the record is written *before* the first plugin runs so that DEL
    still has the config and capability args (portmap's DEL does nothing without
    its ``portMappings``) to clean up after a crash.
    """

    network: str
    container_id: str
    ifname: str
    netns: str
    config: NetworkConfigList
    result: CNIResult | None
    cni_args: str
    capability_args: Mapping[str, Any]

    def _call(self, netns: str) -> _Call:
        return _Call(self.container_id, netns, self.ifname, self.cni_args, self.capability_args)


@attrs.frozen
class _Call:
    """The per-invocation parameters that become the CNI_* environment."""

    container_id: str
    netns: str
    ifname: str
    cni_args: str
    capability_args: Mapping[str, Any]

    def env(self, command: str) -> dict[str, str]:
        return {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.container_id,
            "CNI_NETNS": self.netns,
            "CNI_IFNAME": self.ifname,
            "CNI_ARGS": self.cni_args,
        }


# ------------------------------------------------------------------- validation


def validate_network_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidArgument(f"invalid CNI network name {name!r}")
    return name


def validate_container_id(container_id: str) -> str:
    """The spec's container id rule; it also keeps cache file names unambiguous."""
    if not isinstance(container_id, str) or not _NAME_RE.match(container_id):
        raise InvalidArgument(f"invalid CNI container id {container_id!r}")
    return container_id


def _invalid(origin: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"invalid CNI network config {origin}: {why}")


def _validate_plugin(origin: str, index: int, plugin: object) -> Mapping[str, Any]:
    where = f"plugins[{index}]"
    if not isinstance(plugin, dict):
        raise _invalid(origin, f"{where} is not an object")
    kind = plugin.get("type")
    if not isinstance(kind, str) or not _NAME_RE.match(kind):
        raise _invalid(origin, f"{where} has no valid 'type' (got {kind!r})")
    caps = plugin.get("capabilities", {})
    if not isinstance(caps, dict) or not all(isinstance(v, bool) for v in caps.values()):
        raise _invalid(origin, f"{where}.capabilities must map names to true/false")
    ipam = plugin.get("ipam")
    if ipam is not None:
        if not isinstance(ipam, dict):
            raise _invalid(origin, f"{where}.ipam is not an object")
        ipam_type = ipam.get("type")
        if ipam_type is not None and (
            not isinstance(ipam_type, str) or not _NAME_RE.match(ipam_type)
        ):
            raise _invalid(origin, f"{where}.ipam has an invalid 'type' {ipam_type!r}")
    return plugin


def _parse_conflist(data: object, origin: str) -> NetworkConfigList:
    if not isinstance(data, dict):
        raise _invalid(origin, "the top level is not a JSON object")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise _invalid(origin, f"missing or invalid 'name' ({name!r})")
    version = data.get("cniVersion")
    if version not in SUPPORTED_VERSIONS:
        raise _invalid(
            origin,
            f"unsupported cniVersion {version!r}; ctrexec supports {', '.join(SUPPORTED_VERSIONS)}",
        )
    plugins = data.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        hint = " (a single-plugin .conf? wrap it in a 'plugins' list)" if "type" in data else ""
        raise _invalid(origin, f"missing or empty 'plugins' list{hint}")
    disable_check = data.get("disableCheck", False)
    if isinstance(disable_check, str) and disable_check.lower() in ("true", "false"):
        disable_check = disable_check.lower() == "true"  # libcni accepts the strings too
    if not isinstance(disable_check, bool):
        raise _invalid(origin, "'disableCheck' must be true or false")
    return NetworkConfigList(
        name=name,
        cni_version=version,
        plugins=tuple(_validate_plugin(origin, i, p) for i, p in enumerate(plugins)),
        disable_check=disable_check,
        raw=data,
    )


def load_conflist(source: str | os.PathLike[str] | Mapping[str, Any]) -> NetworkConfigList:
    """Load and validate a conflist from a file path or a JSON-shaped mapping.

    NotFound for a missing file; InvalidArgument for everything wrong inside it.
    The result owns a deep copy, so later changes to ``source`` do not leak in.
    """
    if isinstance(source, Mapping):
        return _parse_conflist(copy.deepcopy(dict(source)), "<mapping>")
    path = Path(os.fspath(source))
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise NotFound(f"CNI network config {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read CNI network config {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(str(path), f"not valid JSON ({exc})") from exc
    return _parse_conflist(data, str(path))


def format_cni_args(args: Mapping[str, str] | None) -> str:
    """``CNI_ARGS``: ``K=V;K2=V2``, led by ``IgnoreUnknown=1`` like containerd does.

    Plugins reject keys they do not know unless IgnoreUnknown is set, and runtimes
    pass keys meant for other plugins of the chain.
    """
    if not args:
        return ""
    pairs = []
    for key, value in args.items():
        if not isinstance(key, str) or not _ARG_KEY_RE.match(key):
            raise InvalidArgument(f"invalid CNI_ARGS key {key!r}")
        if not isinstance(value, str) or ";" in value or "\0" in value:
            raise InvalidArgument(f"invalid CNI_ARGS value for {key}: {value!r}")
        pairs.append(f"{key}={value}")
    if "IgnoreUnknown" not in args:
        pairs.insert(0, "IgnoreUnknown=1")
    return ";".join(pairs)


def build_plugin_config(
    conf: NetworkConfigList,
    plugin: Mapping[str, Any],
    *,
    prev_result: Mapping[str, Any] | None,
    capability_args: Mapping[str, Any],
) -> JSONDict:
    """The stdin JSON for one plugin (spec 1.0 "deriving execution configuration").

    Inject ``name`` and ``cniVersion``; give the plugin, in ``runtimeConfig``, only
    the capability args it declares; drop ``capabilities``; add ``prevResult``.
    """
    out = copy.deepcopy(dict(plugin))
    caps = out.pop("capabilities", None) or {}
    out["name"] = conf.name
    out["cniVersion"] = conf.cni_version
    runtime = {k: capability_args[k] for k, on in caps.items() if on and k in capability_args}
    if runtime:
        merged = dict(out.get("runtimeConfig") or {})
        merged.update(copy.deepcopy(runtime))
        out["runtimeConfig"] = merged
    if prev_result is not None:
        out["prevResult"] = copy.deepcopy(dict(prev_result))
    return out


# ------------------------------------------------------------------ result parsing


def _bad_result(why: str) -> NetworkError:
    return NetworkError(f"malformed CNI result: {why}")


def _str_list(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad_result(f"{where} must be a list of strings")
    return tuple(value)


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad_result(f"{key} must be a list")
    return value


def _parse_ip(item: object, version: str, n_ifaces: int) -> CNIIPConfig:
    if not isinstance(item, dict) or not isinstance(item.get("address"), str):
        raise _bad_result(f"ips entry without an address: {item!r}")
    try:
        iface = ipaddress.ip_interface(item["address"])
    except ValueError as exc:
        raise _bad_result(f"invalid address {item['address']!r}") from exc
    declared = item.get("version")
    if declared is not None and version != "1.0.0" and str(declared) != str(iface.version):
        raise _bad_result(f"ips entry says version {declared!r} for {item['address']}")
    gateway = item.get("gateway")
    if gateway is not None:
        try:
            ipaddress.ip_address(gateway)
        except ValueError as exc:
            raise _bad_result(f"invalid gateway {gateway!r}") from exc
    index = item.get("interface")
    if index is not None and (
        not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n_ifaces
    ):
        raise _bad_result(f"ips entry points at interface {index!r} of {n_ifaces}")
    return CNIIPConfig(
        address=item["address"], version=iface.version, gateway=gateway, interface=index
    )


def parse_result(data: object, *, default_version: str | None = None) -> CNIResult:
    """Parse an ADD result of any supported cniVersion into value types.

    0.3.x/0.4.0 results carry ``ips[].version``; 1.0.0 dropped it, so the family
    always comes from the address itself.
    """
    if data is None:
        raise _bad_result("the plugins printed no result")
    if not isinstance(data, dict):
        raise _bad_result("not a JSON object")
    version = data.get("cniVersion", default_version)
    if version not in SUPPORTED_VERSIONS:
        raise _bad_result(f"unsupported cniVersion {version!r}")
    interfaces = []
    for item in _list(data, "interfaces"):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _bad_result(f"interface without a name: {item!r}")
        interfaces.append(
            CNIInterface(
                name=item["name"], mac=item.get("mac") or None, sandbox=item.get("sandbox") or None
            )
        )
    ips = tuple(_parse_ip(i, version, len(interfaces)) for i in _list(data, "ips"))
    routes = []
    for item in _list(data, "routes"):
        if not isinstance(item, dict) or not isinstance(item.get("dst"), str):
            raise _bad_result(f"route without a dst: {item!r}")
        routes.append(CNIRoute(dst=item["dst"], gw=item.get("gw") or None))
    dns_data = data.get("dns")
    dns_data = {} if dns_data is None else dns_data
    if not isinstance(dns_data, dict):
        raise _bad_result("dns is not an object")
    dns = CNIDNS(
        nameservers=_str_list(dns_data.get("nameservers"), "dns.nameservers"),
        domain=dns_data.get("domain") or None,
        search=_str_list(dns_data.get("search"), "dns.search"),
        options=_str_list(dns_data.get("options"), "dns.options"),
    )
    return CNIResult(
        cni_version=version,
        interfaces=tuple(interfaces),
        ips=ips,
        routes=tuple(routes),
        dns=dns,
        raw=data,
    )


def parse_error(stdout: bytes, stderr: bytes, returncode: int, *, plugin: str) -> CNIError:
    """Turn a failed plugin run into a CNIError (spec error JSON, else stderr)."""
    tail = stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL:]
    data: object = None
    with contextlib.suppress(ValueError):
        data = json.loads(stdout) if stdout.strip() else None
    if isinstance(data, dict) and ("code" in data or "msg" in data):
        raw_code = data.get("code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else 0
        msg = str(data.get("msg") or ERROR_CODES.get(code, "error"))
        details = str(data.get("details") or "")
        text = f"CNI plugin {plugin}: {msg}"
        if details:
            text += f": {details}"
        text += f" (code {code}" + (f", {ERROR_CODES[code]})" if code in ERROR_CODES else ")")
        return CNIError(text, code=code, details=details)
    return CNIError(
        f"CNI plugin {plugin} exited with status {returncode}: {tail or '(no output)'}",
        details=tail,
    )


def bridge_conflist(
    name: str,
    bridge: str,
    subnet: str,
    gateway: str | None = None,
    ports: bool = True,
    *,
    ipam_dir: str = DEFAULT_IPAM_DIR,
    ip_masq: bool = True,
    hairpin: bool = True,
    mtu: int | None = None,
    firewall: bool = False,
    cni_version: str = "1.0.0",
) -> NetworkConfigList:
    """ctrexec's default network: a bridge, host-local IPAM under /run, portmap.

    ``isGateway`` gives the bridge the gateway address (and the host a route to
    the subnet, which portmap needs for 127.0.0.1); ``hairpinMode`` lets a task
    reach itself through a published port; portmap's ``snat`` makes published
    ports answer on localhost. ``lo`` is not a plugin here: :func:`ctrexec.netns.create`
    already set it up. Note: the bridge plugin enables net.ipv4.ip_forward.
    """
    validate_network_name(name)
    _netns.validate_ifname(bridge)
    try:
        net = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise InvalidArgument(f"invalid subnet {subnet!r}: {exc}") from exc
    if net.num_addresses < 4:
        raise InvalidArgument(f"subnet {subnet} is too small")
    try:
        gw = ipaddress.ip_address(gateway) if gateway else next(net.hosts())
    except ValueError as exc:
        raise InvalidArgument(f"invalid gateway {gateway!r}") from exc
    if gw not in net or gw in (net.network_address, net.broadcast_address):
        raise InvalidArgument(f"gateway {gw} is not a host address of {subnet}")
    default = "0.0.0.0/0" if net.version == 4 else "::/0"
    bridge_plugin: JSONDict = {
        "type": "bridge",
        "bridge": bridge,
        "isGateway": True,
        "ipMasq": ip_masq,
        "hairpinMode": hairpin,
        "ipam": {
            "type": "host-local",
            "dataDir": ipam_dir,
            "ranges": [[{"subnet": str(net), "gateway": str(gw)}]],
            "routes": [{"dst": default}],
        },
    }
    if mtu is not None:
        bridge_plugin["mtu"] = mtu
    plugins: list[JSONDict] = [bridge_plugin]
    if ports:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}, "snat": True})
    if firewall:
        plugins.append({"type": "firewall"})
    return load_conflist({"cniVersion": cni_version, "name": name, "plugins": plugins})


# ----------------------------------------------------------------------- runtime


class _KeyedLocks:
    """One lock per attachment, shared by every CNI object in the process.

    The spec forbids parallel operations on one container; entries disappear when
    nobody holds or waits for them, so long-running schedulers do not accumulate them.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


_attachment_locks = _KeyedLocks()


class CNI:
    """Runs CNI plugins for ctrexec: ADD / CHECK / DEL with a result cache.

    ``network`` arguments take a conflist (:class:`NetworkConfigList`) or the name
    of one found in ``conf_dir`` (``*.conflist`` files). ``verify_netns=False``
    skips the namespace check, for tests that drive fake plugins without root.
    """

    def __init__(
        self,
        *,
        plugin_dirs: Sequence[str | os.PathLike[str]] = DEFAULT_PLUGIN_DIRS,
        conf_dir: str | os.PathLike[str] = DEFAULT_CONF_DIR,
        cache_dir: str | os.PathLike[str] = DEFAULT_CACHE_DIR,
        timeout: float = DEFAULT_TIMEOUT,
        verify_netns: bool = True,
    ) -> None:
        if isinstance(plugin_dirs, str | os.PathLike):
            plugin_dirs = [plugin_dirs]
        self.plugin_dirs = tuple(os.fspath(d) for d in plugin_dirs)
        if not self.plugin_dirs:
            raise InvalidArgument("at least one CNI plugin directory is needed")
        self.conf_dir = Path(conf_dir)
        self.cache_dir = Path(cache_dir)
        self.timeout = timeout
        self.verify_netns = verify_netns
        self._versions: dict[tuple[str, int, int], tuple[str, ...]] = {}

    # ---------------------------------------------------------------- lookup

    def find_plugin(self, kind: str) -> str:
        """The executable for plugin ``type``; InvalidArgument if not installed."""
        if not _NAME_RE.match(kind):
            raise InvalidArgument(f"invalid CNI plugin type {kind!r}")
        for directory in self.plugin_dirs:
            candidate = Path(directory) / kind
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        raise InvalidArgument(
            f"CNI plugin {kind!r} is not installed in {':'.join(self.plugin_dirs)}"
        )

    def load_network(self, name: str) -> NetworkConfigList:
        """The conflist named ``name`` in ``conf_dir`` (first file by name wins)."""
        validate_network_name(name)
        try:
            files = sorted(self.conf_dir.glob("*.conflist"))
        except OSError as exc:
            raise NotFound(f"cannot read CNI config dir {self.conf_dir}: {exc}") from exc
        for path in files:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("skipping unreadable CNI config %s: %s", path, exc)
                continue
            if isinstance(data, dict) and data.get("name") == name:
                return _parse_conflist(data, str(path))
        raise NotFound(f"no CNI network {name!r} in {self.conf_dir}")

    def _conflist(self, network: str | NetworkConfigList) -> NetworkConfigList:
        return network if isinstance(network, NetworkConfigList) else self.load_network(network)

    def plugin_versions(self, kind: str) -> tuple[str, ...]:
        """The spec versions a plugin supports (VERSION command, cached per binary)."""
        binary = self.find_plugin(kind)
        st = Path(binary).stat()
        key = (binary, st.st_mtime_ns, st.st_size)
        if key not in self._versions:
            out = self._run(binary, kind, {"CNI_COMMAND": "VERSION"}, {"cniVersion": "1.0.0"})
            versions = out.get("supportedVersions") if out else None
            if not isinstance(versions, list):
                raise NetworkError(f"CNI plugin {kind} answered VERSION without supportedVersions")
            self._versions[key] = tuple(str(v) for v in versions)
        return self._versions[key]

    def validate(self, network: str | NetworkConfigList) -> NetworkConfigList:
        """Check a network can run here, with no side effect on any container.

        Every plugin and IPAM binary must be installed, and every plugin must
        support the conflist's cniVersion. Called by :meth:`add` before any ADD.
        """
        conf = self._conflist(network)
        for plugin in conf.plugins:  # all binaries first: cheap, and no exec at all
            self.find_plugin(plugin["type"])
            ipam = plugin.get("ipam") or {}
            if ipam.get("type"):
                self.find_plugin(ipam["type"])
        for plugin in conf.plugins:
            supported = self.plugin_versions(plugin["type"])
            if conf.cni_version not in supported:
                raise InvalidArgument(
                    f"CNI plugin {plugin['type']!r} does not support cniVersion "
                    f"{conf.cni_version} (it supports {', '.join(supported)})"
                )
        return conf

    # ----------------------------------------------------------------- cache

    def cache_path(self, network: str, container_id: str, ifname: str) -> Path:
        """``<cache_dir>/<network>+<container id>+<ifname>.json``.

        "+" cannot occur in network names or container ids, so -- unlike a "-"
        separator, where ("a-b", "c") and ("a", "b-c") collide -- the name is unique.
        """
        validate_network_name(network)
        validate_container_id(container_id)
        _netns.validate_ifname(ifname)
        return self.cache_dir / f"{network}+{container_id}+{ifname}.json"

    def _write_cache(self, path: Path, attachment: Attachment) -> None:
        record = {
            "kind": _CACHE_KIND,
            "network": attachment.network,
            "containerId": attachment.container_id,
            "ifName": attachment.ifname,
            "netns": attachment.netns,
            "config": attachment.config.to_json(),
            "cniArgs": attachment.cni_args,
            "capabilityArgs": dict(attachment.capability_args),
            "result": attachment.result.to_json() if attachment.result else None,
        }
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            tmp.chmod(0o600)
            tmp.replace(path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NetworkError(f"cannot write CNI result cache {path}: {exc}") from exc

    def _read_cache(self, path: Path) -> Attachment | None:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise NetworkError(f"unreadable CNI result cache {path}: {exc}") from exc
        if not isinstance(record, dict) or record.get("kind") != _CACHE_KIND:
            raise NetworkError(f"{path} is not a ctrexec CNI result cache")
        try:
            conf = _parse_conflist(record["config"], str(path))
            return Attachment(
                network=record["network"],
                container_id=record["containerId"],
                ifname=record["ifName"],
                netns=record["netns"],
                config=conf,
                result=None
                if record["result"] is None
                else parse_result(record["result"], default_version=conf.cni_version),
                cni_args=record.get("cniArgs", ""),
                capability_args=record.get("capabilityArgs") or {},
            )
        except (KeyError, InvalidArgument) as exc:
            raise NetworkError(f"corrupt CNI result cache {path}: {exc}") from exc

    def attachment(
        self, network: str, container_id: str, ifname: str = "eth0"
    ) -> Attachment | None:
        """The cached ADD for an attachment, or None: how a restart finds its IPs."""
        return self._read_cache(self.cache_path(network, container_id, ifname))

    def attachments(self) -> list[Attachment]:
        """Every readable cached attachment (for recovery and garbage collection)."""
        out = []
        for path in sorted(self.cache_dir.glob("*.json")):
            try:
                found = self._read_cache(path)
            except NetworkError as exc:
                log.warning("%s", exc)
                continue
            if found is not None:
                out.append(found)
        return out

    # ------------------------------------------------------------------- exec

    def _run(
        self, binary: str, kind: str, cni_env: Mapping[str, str], config: Mapping[str, Any]
    ) -> JSONDict | None:
        """Exec one plugin; return its JSON answer (None if it printed nothing)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
        env.update(cni_env)
        env["CNI_PATH"] = os.pathsep.join(self.plugin_dirs)
        command = cni_env["CNI_COMMAND"]
        try:
            proc = subprocess.Popen(
                [binary],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise NetworkError(f"cannot run CNI plugin {binary}: {exc.strerror}") from exc
        try:
            stdout, stderr = proc.communicate(json.dumps(config).encode(), timeout=self.timeout)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # our child's own session
            proc.communicate()
            raise NetworkError(
                f"CNI plugin {kind} {command} timed out after {self.timeout:g}s"
            ) from exc
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if proc.returncode != 0:
            raise parse_error(stdout, stderr, proc.returncode, plugin=f"{kind} {command}")
        if not stdout.strip():
            return None
        try:
            data = json.loads(stdout)
        except ValueError as exc:
            raise NetworkError(f"CNI plugin {kind} {command} printed invalid JSON") from exc
        if not isinstance(data, dict):
            raise NetworkError(f"CNI plugin {kind} {command} printed a non-object")
        return data

    def _invoke(
        self,
        command: str,
        conf: NetworkConfigList,
        plugin: Mapping[str, Any],
        call: _Call,
        prev: Mapping[str, Any] | None,
    ) -> JSONDict | None:
        stdin = build_plugin_config(
            conf, plugin, prev_result=prev, capability_args=call.capability_args
        )
        kind = plugin["type"]
        return self._run(self.find_plugin(kind), kind, call.env(command), stdin)

    def _usable_netns(self, path: str) -> str:
        """The namespace path for DEL, or "" once it is gone (plugins then skip it)."""
        if not path:
            return ""
        if not self.verify_netns:
            return path if Path(path).exists() else ""
        try:
            _netns.verify(path)
        except (NotFound, InvalidArgument, NetworkError) as exc:
            log.info("DEL with no netns: %s", exc)
            return ""
        return path

    # ------------------------------------------------------------- commands

    def add(
        self,
        network: str | NetworkConfigList,
        container_id: str,
        netns_path: str | os.PathLike[str],
        ifname: str = "eth0",
        *,
        args: Mapping[str, str] | None = None,
        capability_args: Mapping[str, Any] | None = None,
        port_mappings: Sequence[PortMapping] = (),
    ) -> CNIResult:
        """Attach a namespace to a network; returns the last plugin's result.

        AlreadyExists if this attachment was already added (DEL it first). If a
        plugin fails, what ran is rolled back with a best-effort DEL and the
        plugin's CNIError is raised; if that DEL fails too, the cache record stays
        so a later :meth:`delete` can finish the job.
        """
        conf = self._conflist(network)
        validate_container_id(container_id)
        _netns.validate_ifname(ifname)
        ns_path = os.fspath(netns_path)
        if not Path(ns_path).is_absolute():
            raise InvalidArgument(f"netns path {ns_path!r} must be absolute")
        cni_args = format_cni_args(args)
        caps = _capability_args(capability_args, port_mappings)
        if self.verify_netns:
            _netns.verify(ns_path)
        self.validate(conf)
        path = self.cache_path(conf.name, container_id, ifname)
        call = _Call(container_id, ns_path, ifname, cni_args, caps)
        with _attachment_locks.hold(str(path)):
            if path.exists():
                raise AlreadyExists(
                    f"{container_id} is already attached to {conf.name} as {ifname}; "
                    "DEL it before adding it again"
                )
            pending = Attachment(
                network=conf.name,
                container_id=container_id,
                ifname=ifname,
                netns=ns_path,
                config=conf,
                result=None,
                cni_args=cni_args,
                capability_args=caps,
            )
            self._write_cache(path, pending)
            prev: JSONDict | None = None
            try:
                for plugin in conf.plugins:
                    out = self._invoke("ADD", conf, plugin, call, prev)
                    prev = out if out is not None else prev
                result = parse_result(prev, default_version=conf.cni_version)
                self._write_cache(path, attrs.evolve(pending, result=result))
            except BaseException:
                if self._rollback(conf, prev, call):
                    path.unlink(missing_ok=True)
                raise
        return result

    def _rollback(self, conf: NetworkConfigList, prev: JSONDict | None, call: _Call) -> bool:
        """Best-effort DEL of a failed ADD; True if every plugin's DEL succeeded."""
        if not _is_040_or_later(conf.cni_version):
            prev = None
        ok = True
        for plugin in reversed(conf.plugins):
            try:
                self._invoke("DEL", conf, plugin, call, prev)
            except Exception as exc:  # keep the ADD error; log the cleanup one
                ok = False
                log.warning("rollback DEL of %s (%s) failed: %s", conf.name, plugin["type"], exc)
        return ok

    def check(
        self,
        network: str | NetworkConfigList,
        container_id: str,
        netns_path: str | os.PathLike[str] | None = None,
        ifname: str = "eth0",
    ) -> None:
        """Ask every plugin whether the attachment is still as ADD left it.

        Uses the cached config, result, args and (unless given) namespace path of
        the ADD; NotFound if there was none. FailedPrecondition before 0.4.0.
        """
        name = network.name if isinstance(network, NetworkConfigList) else network
        path = self.cache_path(name, container_id, ifname)
        with _attachment_locks.hold(str(path)):
            cached = self._read_cache(path)
            if cached is None:
                raise NotFound(f"{container_id} was not added to {name} as {ifname}")
            if cached.result is None:
                raise FailedPrecondition(f"the ADD of {container_id} to {name} did not complete")
            conf = cached.config
            if not _is_040_or_later(conf.cni_version):
                raise FailedPrecondition(
                    f"CHECK needs cniVersion 0.4.0+, {name} has {conf.cni_version}"
                )
            if conf.disable_check:
                return
            ns_path = os.fspath(netns_path) if netns_path is not None else cached.netns
            if self.verify_netns:
                _netns.verify(ns_path)
            for plugin in conf.plugins:
                self._invoke("CHECK", conf, plugin, cached._call(ns_path), cached.result.raw)

    def delete(
        self,
        network: str | NetworkConfigList,
        container_id: str,
        netns_path: str | os.PathLike[str] | None = None,
        ifname: str = "eth0",
        *,
        args: Mapping[str, str] | None = None,
        capability_args: Mapping[str, Any] | None = None,
        port_mappings: Sequence[PortMapping] = (),
    ) -> None:
        """Detach; idempotent. Plugins run in reverse order with the cached ADD.

        Without a cache entry the given (or conf_dir's) conflist is used with no
        prevResult (pass the same ``port_mappings`` as the ADD then); with neither,
        nothing is known to clean and DEL is a no-op. A gone namespace is passed as
        an empty CNI_NETNS. On a plugin error the cache entry is kept, so DEL can be
        retried.
        """
        name = network.name if isinstance(network, NetworkConfigList) else network
        path = self.cache_path(name, container_id, ifname)
        with _attachment_locks.hold(str(path)):
            try:
                cached = self._read_cache(path)
            except NetworkError as exc:
                log.warning("DEL without the cached ADD: %s", exc)
                cached = None
            prev: Mapping[str, Any] | None = None
            if cached is not None:
                conf = cached.config
                prev = cached.result.raw if cached.result else None
                cni_args = cached.cni_args if args is None else format_cni_args(args)
                caps = cached.capability_args
                if capability_args is not None or port_mappings:
                    caps = _capability_args(capability_args, port_mappings)
                ns_path = cached.netns if netns_path is None else os.fspath(netns_path)
            else:
                try:
                    conf = self._conflist(network)
                except NotFound as exc:
                    log.info("DEL %s/%s: nothing cached and %s", name, container_id, exc)
                    return
                cni_args = format_cni_args(args)
                caps = _capability_args(capability_args, port_mappings)
                ns_path = "" if netns_path is None else os.fspath(netns_path)
            if not _is_040_or_later(conf.cni_version):
                prev = None
            call = _Call(container_id, self._usable_netns(ns_path), ifname, cni_args, caps)
            for plugin in reversed(conf.plugins):
                self._invoke("DEL", conf, plugin, call, prev)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise NetworkError(f"cannot remove CNI result cache {path}: {exc}") from exc


def _capability_args(
    capability_args: Mapping[str, Any] | None, port_mappings: Sequence[PortMapping]
) -> JSONDict:
    caps = copy.deepcopy(dict(capability_args or {}))
    if port_mappings:
        if "portMappings" in caps:
            raise InvalidArgument(
                "give port mappings either as port_mappings or in capability_args"
            )
        caps["portMappings"] = [pm.to_json() for pm in port_mappings]
    try:
        json.dumps(caps)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"capability args are not JSON: {exc}") from exc
    return caps
