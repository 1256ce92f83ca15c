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
- Each attachment names its owner (:func:`ctrexec.owners.attachment_record`, the
  owner its namespace's pin records), written before the ADD and removed with the
  cached result, so gc removes only its own results and reservations.
- Known limits of containernetworking-plugins 1.1.1 (Debian 12): the bridge
  plugin finds the addresses to un-masquerade on the container interface, so DEL
  an attachment *before* removing its namespace or its ipMasq rule stays; and
  portmap's CHECK fails on IPv4-only attachments (containernetworking/plugins#819).
- Plugins run with :mod:`subprocess`. On Linux CPython 3.11 that is vfork+exec
  (no ``preexec_fn``), which runs no fork handlers -- neither Python's nor gRPC's --
  and copies no address space. ``close_fds`` keeps gRPC and netlink sockets out of
  plugins; each plugin gets its own session so a timeout kills its helpers too.

The value side -- conflist validation, each plugin's stdin, result and error
parsing -- lives in :mod:`ctrexec.net.cniconf`, which never execs anything; this module
runs plugins and remembers what they did. The public names of :mod:`ctrexec.net.cniconf`
are re-exported here, so ``from ctrexec.net.cni import X`` works for both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ctrexec import owners
from ctrexec.defaults import RUN_DIR
from ctrexec.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
)
from ctrexec.net import netns as _netns
from ctrexec.net import nsmarks as _nsmarks
from ctrexec.net.cniconf import (
    CNIDNS,
    DEFAULT_IPAM_DIR,
    ERROR_CODES,
    SUPPORTED_VERSIONS,
    CNIAttachment,
    CNIInterface,
    CNIIPConfig,
    CNIResult,
    CNIRoute,
    JSONDict,
    NetworkConfigList,
    PluginCall,
    PortMapping,
    bridge_conflist,
    build_plugin_config,
    format_cni_args,
    is_040_or_later,
    load_conflist,
    merge_capability_args,
    parse_conflist,
    parse_error,
    parse_result,
    validate_container_id,
    validate_network_name,
    validate_plugin_type,
)

__all__ = [
    "CNI",
    "CNIDNS",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_CONF_DIR",
    "DEFAULT_IPAM_DIR",
    "DEFAULT_PLUGIN_DIRS",
    "DEFAULT_TIMEOUT",
    "ERROR_CODES",
    "SUPPORTED_VERSIONS",
    "CNIAttachment",
    "CNIIPConfig",
    "CNIInterface",
    "CNIResult",
    "CNIRoute",
    "JSONDict",
    "NetworkConfigList",
    "PluginCall",
    "PortMapping",
    "bridge_conflist",
    "build_plugin_config",
    "format_cni_args",
    "is_040_or_later",
    "load_conflist",
    "merge_capability_args",
    "parse_conflist",
    "parse_error",
    "parse_result",
    "validate_container_id",
    "validate_network_name",
    "validate_plugin_type",
]

log = logging.getLogger(__name__)

DEFAULT_PLUGIN_DIRS = ("/opt/cni/bin", "/usr/lib/cni")
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CACHE_DIR = f"{RUN_DIR}/cni/results"
DEFAULT_TIMEOUT = 60.0

_CACHE_KIND = "ctrexec/cni-attachment/v1"


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
        validate_plugin_type(kind)
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
                return parse_conflist(data, str(path))
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

    def owner_path(self, network: str, container_id: str, ifname: str) -> Path:
        return owners.attachment_record(self.cache_dir, network, container_id, ifname)

    def owner(self, network: str, container_id: str, ifname: str) -> owners.Owner | None:
        """Who made the attachment (its result and reservation); None if not recorded."""
        return owners.read(self.owner_path(network, container_id, ifname))

    def _record_owner(self, network: str, container_id: str, ifname: str, ns_path: str) -> None:
        """Record the pin's owner as the attachment's; no record for a namespace whose pin
        names none (gc then spares what the ADD makes)."""
        path = self.owner_path(network, container_id, ifname)
        owner = _nsmarks.owner_of(ns_path)
        try:
            if owner is None:
                owners.forget(path)
            else:
                owners.write(path, owner)
        except OSError as exc:
            raise NetworkError(f"cannot record the owner of {container_id}: {exc}") from exc

    def _drop(self, network: str, container_id: str, ifname: str) -> None:
        """Forget a rolled-back ADD: its cached record and its owner record."""
        self.cache_path(network, container_id, ifname).unlink(missing_ok=True)
        owners.forget(self.owner_path(network, container_id, ifname))

    def _write_cache(
        self, path: Path, attachment: CNIAttachment, *, record_owner: bool = False
    ) -> None:
        """Cache ``attachment``; with ``record_owner`` (the pending record, before the
        first plugin runs), first record its namespace's pin's owner as its owner."""
        a = attachment
        if record_owner:
            self._record_owner(a.network, a.container_id, a.ifname, a.netns)
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

    def _read_cache(self, path: Path) -> CNIAttachment | None:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise NetworkError(f"unreadable CNI result cache {path}: {exc}") from exc
        if not isinstance(record, dict) or record.get("kind") != _CACHE_KIND:
            raise NetworkError(f"{path} is not a ctrexec CNI result cache")
        try:
            conf = parse_conflist(record["config"], str(path))
            return CNIAttachment(
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
    ) -> CNIAttachment | None:
        """The cached ADD for an attachment, or None: how a restart finds its IPs."""
        return self._read_cache(self.cache_path(network, container_id, ifname))

    def attachments(self) -> list[CNIAttachment]:
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
        call: PluginCall,
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
        caps = merge_capability_args(capability_args, port_mappings)
        if self.verify_netns:
            _netns.verify(ns_path)
        self.validate(conf)
        path = self.cache_path(conf.name, container_id, ifname)
        call = PluginCall(container_id, ns_path, ifname, cni_args, caps)
        with _attachment_locks.hold(str(path)):
            if path.exists():
                raise AlreadyExists(
                    f"{container_id} is already attached to {conf.name} as {ifname}; "
                    "DEL it before adding it again"
                )
            pending = CNIAttachment(
                network=conf.name,
                container_id=container_id,
                ifname=ifname,
                netns=ns_path,
                config=conf,
                result=None,
                cni_args=cni_args,
                capability_args=caps,
            )
            self._write_cache(path, pending, record_owner=True)
            prev: JSONDict | None = None
            try:
                for plugin in conf.plugins:
                    out = self._invoke("ADD", conf, plugin, call, prev)
                    prev = out if out is not None else prev
                result = parse_result(prev, default_version=conf.cni_version)
                self._write_cache(path, attrs.evolve(pending, result=result))
            except BaseException:
                if self._rollback(conf, prev, call):
                    self._drop(conf.name, container_id, ifname)
                raise
        return result

    def _rollback(self, conf: NetworkConfigList, prev: JSONDict | None, call: PluginCall) -> bool:
        """Best-effort DEL of a failed ADD; True if every plugin's DEL succeeded."""
        if not is_040_or_later(conf.cni_version):
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
            if not is_040_or_later(conf.cni_version):
                raise FailedPrecondition(
                    f"CHECK needs cniVersion 0.4.0+, {name} has {conf.cni_version}"
                )
            if conf.disable_check:
                return
            ns_path = os.fspath(netns_path) if netns_path is not None else cached.netns
            if self.verify_netns:
                _netns.verify(ns_path)
            for plugin in conf.plugins:
                self._invoke("CHECK", conf, plugin, cached.call(ns_path), cached.result.raw)

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
                    caps = merge_capability_args(capability_args, port_mappings)
                ns_path = cached.netns if netns_path is None else os.fspath(netns_path)
            else:
                try:
                    conf = self._conflist(network)
                except NotFound as exc:
                    log.info("DEL %s/%s: nothing cached and %s", name, container_id, exc)
                    owners.forget(self.owner_path(name, container_id, ifname))
                    return
                cni_args = format_cni_args(args)
                caps = merge_capability_args(capability_args, port_mappings)
                ns_path = "" if netns_path is None else os.fspath(netns_path)
            if not is_040_or_later(conf.cni_version):
                prev = None
            call = PluginCall(container_id, self._usable_netns(ns_path), ifname, cni_args, caps)
            for plugin in reversed(conf.plugins):
                self._invoke("DEL", conf, plugin, call, prev)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise NetworkError(f"cannot remove CNI result cache {path}: {exc}") from exc
            owners.forget(self.owner_path(name, container_id, ifname))
