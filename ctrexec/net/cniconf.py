"""CNI configuration and results as values: parse, validate, derive -- never exec.

This is the data half of the CNI spec, split from :mod:`ctrexec.net.cni` (which runs
plugins and keeps the result cache) so that it stays pure: nothing here spawns a
process, enters a namespace or writes a file, so every rule is unit-testable
without root, and the runtime reads as what it does with these values.

- A conflist is validated up front into a :class:`NetworkConfigList`: names become
  executable names (a plugin's ``type``) and cache file names (network, container
  id), so "/" and ".." are refused before anything reaches the filesystem.
- What one plugin run is given is derived here: its stdin
  (:func:`build_plugin_config`, the spec's "deriving execution configuration"),
  its ``CNI_ARGS`` (:func:`format_cni_args`), its capability args and the rest of
  its ``CNI_*`` environment (``PluginCall``).
- What plugins print is parsed into a :class:`CNIResult` (any supported
  cniVersion) or a :class:`~ctrexec.errors.CNIError`.
- :class:`CNIAttachment` is the record of one ADD that the runtime caches;
  :func:`bridge_conflist` builds ctrexec's default network.

:mod:`ctrexec.net.cni` re-exports the public names, so ``from ctrexec.net.cni import X``
keeps working.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctrexec.defaults import RUN_DIR
from ctrexec.errors import CNIError, InvalidArgument, NetworkError, NotFound
from ctrexec.net import netns as _netns

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0")
#: host-local's state; under /run so a reboot (which also drops every namespace)
#: cannot leave addresses allocated to containers that no longer exist.
DEFAULT_IPAM_DIR = f"{RUN_DIR}/cni/ipam"

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

# Network names (CNI 1.0), container ids (the spec's rule) and plugin types: the
# last becomes an executable name, so "/" and ".." must be impossible.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_ARG_KEY_RE = re.compile(r"^[A-Za-z0-9_]+$")
_STDERR_TAIL = 2000

JSONDict = dict[str, Any]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def is_040_or_later(version: str) -> bool:
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
class CNIAttachment:
    """A cached ADD: enough to CHECK and DEL later, and to recover the addresses.

    :class:`ctrexec.net.cni.CNI` owns the cache file format; this is only the value
    it stores and returns (:meth:`ctrexec.net.cni.CNI.attachment`).

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

    def call(self, netns: str) -> PluginCall:
        """The environment of this ADD again, for CHECK and DEL on ``netns``."""
        return PluginCall(
            self.container_id, netns, self.ifname, self.cni_args, self.capability_args
        )


@attrs.frozen
class PluginCall:
    """The per-invocation parameters that become the CNI_* environment.

    A value, so a :class:`CNIAttachment` can rebuild the exact call of its ADD for
    CHECK and DEL.
    """

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


# ------------------------------------------------- validation and plugin input


def validate_network_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidArgument(f"invalid CNI network name {name!r}")
    return name


def validate_plugin_type(kind: str) -> str:
    """A plugin's ``type`` becomes an executable name, so no "/" or ".." gets through."""
    if not isinstance(kind, str) or not _NAME_RE.match(kind):
        raise InvalidArgument(f"invalid CNI plugin type {kind!r}")
    return kind


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


def parse_conflist(data: object, origin: str) -> NetworkConfigList:
    """Validate already-decoded JSON; ``origin`` (a path) names it in every error.

    The runtime calls this too, on the config a cache record kept, so a DEL
    replays exactly what the ADD was given.
    """
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
        return parse_conflist(copy.deepcopy(dict(source)), "<mapping>")
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
    return parse_conflist(data, str(path))


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


def merge_capability_args(
    capability_args: Mapping[str, Any] | None, port_mappings: Sequence[PortMapping]
) -> JSONDict:
    """Merge ``port_mappings`` into the capability args and check they are JSON.

    They go to plugins as ``runtimeConfig`` and into the cache record, so
    anything json cannot encode is refused before the first plugin runs.
    """
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
    ports answer on localhost. ``lo`` is not a plugin here: :func:`ctrexec.net.netns.create`
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
