"""Nomad's TaskConfig (the StartTask message) onto ctrexec's :class:`TaskConfig`.

What maps and where it goes:

- ``env`` and ``user`` as they are: Nomad interpolated the env already;
- resources: ``linux_resources.cpu_shares``, ``memory_limit_bytes`` (Nomad's
  max(memory, memory_max)) as the hard limit, ``cpuset_cpus``; the task runs in the
  cgroup Nomad's client made for it (``cpuset_cgroup``, :func:`_cgroups`);
- the alloc dir: ``<alloc_dir>/alloc`` at /alloc, ``<alloc_dir>/<task>/local`` at
  /local and ``.../secrets`` at /secrets (FS isolation IMAGE: Nomad set the
  NOMAD_*_DIR variables to those paths), then Nomad's ``mounts`` and ``devices``;
- the network: ``network_isolation_spec.path`` (GROUP: the namespace Nomad made at
  /var/run/netns/<allocID>) is joined, never created or removed; no spec means host;
- /etc/hosts, /etc/hostname and /etc/resolv.conf of a GROUP task (:func:`alloc_addresses`,
  :func:`alloc_hostname`, :func:`_dns`): a real agent sends no ``hostsConfig`` to a
  driver that does not create the network (Nomad fills it only from the docker
  driver's sandbox labels), so the alloc's address is read from the namespace itself;
- the job's ``config {}`` block (see :mod:`ctrexec.nomad.config`), checked against
  what the plugin config allows (:mod:`ctrexec.nomad.policy`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from ctrexec import (
    FailedPrecondition,
    InvalidArgument,
    InvalidField,
    RegistryCredentials,
    TaskConfig,
    cgroup_v2_only,
    cgroupfs_relative,
    credentials_from_helper,
    host_resolver,
    inspect_netns,
    nomad_labels,
)
from ctrexec._api.nomad.drivers import driver_pb2 as pb
from ctrexec.nomad import policy
from ctrexec.nomad.config import PluginConfig

log = logging.getLogger("ctrexec.nomad")

GROUP = pb.NetworkIsolationSpec.GROUP
HOST = pb.NetworkIsolationSpec.HOST
STATE_VERSION = 1
#: The interface Nomad's bridge (CNI) gives the alloc's namespace.
_ALLOC_IFNAME = "eth0"


def container_id(nomad_id: str) -> str:
    """A containerd id for Nomad's ``<allocID>/<task>/<random>``: readable, unique, and
    the same for the same id, so even a plugin that lost its memory finds the task."""
    parts = nomad_id.split("/")
    task = re.sub(r"[^A-Za-z0-9]+", "-", parts[1] if len(parts) > 1 else "task").strip("-")
    alloc = re.sub(r"[^A-Za-z0-9]+", "", parts[0])[:8] or "alloc"
    digest = hashlib.sha256(nomad_id.encode()).hexdigest()[:12]
    return f"{(task or 'task')[:40]}-{alloc}-{digest}"


def owner_labels(task: pb.TaskConfig, addresses: Sequence[str] = ()) -> dict[str, str]:
    """Who the container is to Nomad, and the alloc's ``addresses`` (the task's own
    /etc/hosts line; :func:`alloc_addresses`)."""
    return nomad_labels(task.id, task.alloc_id, task.name, addresses)


def _group_spec(task: pb.TaskConfig) -> pb.NetworkIsolationSpec | None:
    spec = task.network_isolation_spec if task.HasField("network_isolation_spec") else None
    return spec if spec is not None and spec.mode == GROUP else None


def alloc_addresses(task: pb.TaskConfig) -> tuple[str, ...]:
    """The alloc's addresses, for the task's own /etc/hosts line: ``hostsConfig``'s when
    Nomad sends it, else what the alloc namespace's eth0 holds, read over netlink
    (fork-free). Nomad's network hook runs CNI before any task starts, so eth0 has its
    address by StartTask; a namespace without eth0 (mode "none") gives none, and the
    line names 127.0.1.1. Link-local IPv6 is left out: no one reaches the task by it."""
    spec = _group_spec(task)
    if spec is None:
        return ()
    if spec.hostsConfig.address:
        return (spec.hostsConfig.address,)
    found = inspect_netns(spec.path).addresses_of(_ALLOC_IFNAME)
    ips = [ipaddress.ip_address(a.address) for a in found]
    kept = [ip for ip in ips if not (ip.version == 6 and ip.is_link_local)]
    return tuple(str(ip) for ip in sorted(kept, key=lambda ip: ip.version))


def alloc_hostname(task: pb.TaskConfig) -> str | None:
    """The hostname of a GROUP task: ``hostsConfig``'s when Nomad sends it, else the
    alloc's short ID (the first 8 characters, as Nomad's CLI prints it). One name for
    the whole alloc, as the docker driver's tasks share their pause container's name;
    a job can't name it: Nomad refuses ``network { hostname }`` for a driver that does
    not create the network. None (the task's own default) outside a GROUP network."""
    spec = _group_spec(task)
    if spec is None:
        return None
    if spec.hostsConfig.hostname:
        return spec.hostsConfig.hostname
    short = re.sub(r"[^A-Za-z0-9]+", "-", task.alloc_id[:8]).strip("-")
    return short or None


@attrs.frozen(kw_only=True)
class DriverState:
    """What Nomad keeps for us in ``TaskHandle.driver_state``, opaque to it.

    Nomad stores these bytes in its client state and hands them back to whatever plugin
    runs after a restart or an upgrade (RecoverTask), so the format outlives the code
    that wrote it. The rules that keep upgrades working:

    - ``encode`` writes only :data:`STATE_VERSION`, and ``"version"`` is always a
      top-level integer, whatever else a later format changes;
    - ``decode`` reads every version ever released: each one keeps its reader in
      :data:`_READERS`, and a new format adds a reader (filling what the old handle
      lacks from containerd or defaults) rather than changing an old one;
    - a version it does not know (a newer plugin wrote it, then was downgraded) is
      refused with :class:`FailedPrecondition` naming both versions, never guessed at.

    ``tests/data/nomad-driver-state-v1.json`` holds version 1's bytes as released;
    a new version adds its own file and keeps the old ones.
    """

    container_id: str
    namespace: str
    started_at: datetime

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "container_id": self.container_id,
                "namespace": self.namespace,
                "started_at": self.started_at.isoformat(),
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> DriverState:
        try:
            raw = json.loads(data)
            version = raw["version"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"driver_state is not ctrexec's: {exc}") from exc
        reader = _READERS.get(version) if type(version) is int else None
        if reader is None:
            known = ", ".join(str(v) for v in sorted(_READERS))
            raise FailedPrecondition(
                f"driver_state version {version!r} is unknown to this nomad-driver-ctrexec"
                f" (it reads {known}): a newer plugin started the task; run that plugin"
                " again, or stop the task"
            )
        try:
            return reader(raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(f"driver_state version {version} is damaged: {exc}") from exc


def _read_v1(raw: dict[str, Any]) -> DriverState:
    return DriverState(
        container_id=str(raw["container_id"]),
        namespace=str(raw["namespace"]),
        started_at=datetime.fromisoformat(raw["started_at"]),
    )


#: driver_state version -> its reader; every released version stays here.
_READERS: dict[int, Callable[[dict[str, Any]], DriverState]] = {1: _read_v1}


def _netns(task: pb.TaskConfig, opts: dict[str, Any]) -> str:
    spec = task.network_isolation_spec if task.HasField("network_isolation_spec") else None
    if spec is not None and spec.mode == GROUP:
        if opts["host_network"]:
            raise InvalidField(
                "host_network", True, "the group's network mode is not host; remove host_network"
            )
        if not spec.path:
            raise InvalidArgument("Nomad sent a group network without a namespace path")
        return spec.path
    if spec is not None and spec.mode != HOST:
        raise InvalidArgument(
            f"network isolation {pb.NetworkIsolationSpec.NetworkIsolationMode.Name(spec.mode)}"
            " is not supported by ctrexec (use host or bridge)"
        )
    return "host"


def pull_options(opts: dict[str, Any], plugin: PluginConfig | None = None) -> dict[str, Any]:
    """How StartTask gets the image: docker's driver pulls a missing one, ``force_pull``
    always. Credentials as the docker driver finds them: the task's ``auth`` block, else
    the plugin's credential helper, else the plugin's docker config file, else docker's
    default config.json."""
    auth = opts["auth"]
    out: dict[str, Any] = {"policy": "always" if opts["force_pull"] else "missing"}
    if auth and auth.get("username"):
        out["credentials"] = RegistryCredentials(auth["username"], auth.get("password") or "")
    elif plugin is not None and plugin.auth_helper:
        out["credentials"] = credentials_from_helper(plugin.auth_helper, opts["image"])
    elif plugin is not None and plugin.auth_config:
        out["docker_config"] = Path(plugin.auth_config)
    return out


def _mounts(task: pb.TaskConfig, opts: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(volumes, tmpfs): the alloc dir first, then Nomad's mounts, then the job's."""
    volumes = []
    if task.alloc_dir:
        base = task.alloc_dir.rstrip("/")
        volumes += [
            f"{base}/alloc:/alloc",
            f"{base}/{task.name}/local:/local",
            f"{base}/{task.name}/secrets:/secrets",
        ]
    volumes += [f"{m.host_path}:{m.task_path}{':ro' if m.readonly else ''}" for m in task.mounts]
    volumes += list(opts["volumes"])
    tmpfs = []
    for i, m in enumerate(opts["mount"]):
        if m["type"] == "bind":
            volumes.append(f"{m['source']}:{m['target']}{':ro' if m['readonly'] else ''}")
        elif m["type"] == "tmpfs":
            tmpfs.append(f"{m['target']}{':ro' if m['readonly'] else ''}")
        else:
            raise InvalidField(f"mount[{i}].type", m["type"], "expected bind or tmpfs")
    if opts["shm_size"]:
        size = int(opts["shm_size"])
        tmpfs.append(f"/dev/shm:nosuid,noexec,nodev,mode=1777,size={size}")
    return volumes, tmpfs


def _devices(task: pb.TaskConfig, opts: dict[str, Any]) -> list[str]:
    out = [
        f"{d.host_path}:{d.task_path or d.host_path}:{d.cgroup_permissions or 'rwm'}"
        for d in task.devices
    ]
    out += [
        f"{d['host_path']}:{d['container_path'] or d['host_path']}:{d['cgroup_permissions']}"
        for d in opts["device"]
    ]
    return out


def _resources(task: pb.TaskConfig, opts: dict[str, Any]) -> dict[str, Any]:
    linux = task.resources.linux_resources
    out: dict[str, Any] = {}
    if linux.cpu_shares > 0:
        out["cpu_shares"] = max(2, int(linux.cpu_shares))
    if linux.memory_limit_bytes > 0:
        out["memory"] = int(linux.memory_limit_bytes)
        # memory_max set: Nomad's memory is the reservation, memory_max the limit
        reserved = task.resources.allocated_resources.memory.memory_mb * 1024 * 1024
        if 0 < reserved < linux.memory_limit_bytes:
            out["memory_reservation"] = int(reserved)
    if linux.cpuset_cpus:
        out["cpuset_cpus"] = linux.cpuset_cpus
    if opts["pids_limit"]:
        out["pids_limit"] = int(opts["pids_limit"])
    return out


def _cgroups(task: pb.TaskConfig) -> dict[str, Any]:
    """The task's cgroup, where Nomad's client made it (``cpuset_cgroup``: an absolute
    path under /sys/fs/cgroup), as Nomad's exec driver places its tasks:

    - cgroup v2: the path itself, ``<parent>/{share,reserve}.slice/<alloc>.<task>.scope``;
    - cgroup v1: the path is the cpuset hierarchy's ``<parent>/share`` (shared cores, one
      cgroup for all such tasks) or ``<parent>/reserve/<alloc>.<task>`` (reserved ones),
      which the task's init joins; every other hierarchy gets ``<parent>/<alloc>.<task>``.

    Not set (an older agent, no cgroups): ctrexec's own cgroup. A path that would
    leave the cgroup root, or is not of that shape, is refused before anything is made.
    """
    given = task.resources.linux_resources.cpuset_cgroup
    if not given:
        return {}
    try:
        relative = cgroupfs_relative(given)
    except InvalidArgument as exc:
        raise InvalidArgument(f"Nomad's cpuset_cgroup: {exc}") from exc
    if cgroup_v2_only():
        return {"cgroup": relative}
    scope = f"{task.alloc_id}.{task.name}"  # Nomad's cgroup v1 task scope
    parts = relative.split("/")[1:]
    if parts[:1] != ["cpuset"] or "/" in scope or scope.startswith("."):
        raise InvalidArgument(f"Nomad's cpuset_cgroup {given!r} is not in the cpuset hierarchy")
    if parts[-1] == "share":
        parent = parts[1:-1]
    elif parts[-2:] == ["reserve", scope]:
        parent = parts[1:-2]
    else:
        raise InvalidArgument(
            f"Nomad's cpuset_cgroup {given!r} is neither <parent>/share nor"
            f" <parent>/reserve/{scope}"
        )
    return {
        "cgroup": "/" + "/".join([*parent, scope]),
        "cpuset_cgroup": "/" + "/".join(parts[1:]),
    }


def _process(opts: dict[str, Any]) -> dict[str, Any]:
    args = tuple(opts["args"])
    command = (opts["command"], *args) if opts["command"] else (args or None)
    return {
        "command": command,
        "entrypoint": tuple(opts["entrypoint"]) or None,
        "workdir": opts["work_dir"] or None,
    }


def _dns(task: pb.TaskConfig) -> dict[str, Any]:
    """The group's ``network { dns { } }`` (or CNI's DNS result): its resolv.conf
    instead of the host's. As Nomad's GenerateDNSMount does, a part the block leaves
    out (servers, searches, options) comes from the host's resolv.conf; the host's
    loopback servers are not reachable from the alloc's namespace and are left out. No
    server at all: the host's resolver as for a task without the block."""
    if not task.HasField("dns"):
        return {}
    dns = task.dns
    if not (dns.servers or dns.searches or dns.options):
        return {}
    # the host's file is read only for a part the block leaves out
    host = host_resolver() if not (dns.servers and dns.searches and dns.options) else None
    servers = tuple(dns.servers) or (host.servers if host else ())
    if not servers:
        return {}
    return {
        "dns": servers,
        "dns_search": tuple(dns.searches) or (host.searches if host else ()),
        "dns_options": tuple(dns.options) or (host.options if host else ()),
    }


def _output(task: pb.TaskConfig) -> dict[str, Any]:
    """stdout and stderr straight into the FIFOs Nomad's logmon reads: the shim opens
    them itself, so logs flow while the plugin is down. No paths: no output kept."""
    if not (task.stdout_path or task.stderr_path):
        return {"log_driver": "none"}
    return {"stdout_path": task.stdout_path or None, "stderr_path": task.stderr_path or None}


def to_task_config(task: pb.TaskConfig, opts: dict[str, Any], plugin: PluginConfig) -> TaskConfig:
    """The ctrexec config for one Nomad start; a bad value names its config key."""
    netns = _netns(task, opts)
    policy.check_allowed(opts, plugin, own_netns=netns != "host")
    volumes, tmpfs = _mounts(task, opts)
    return TaskConfig(
        name=container_id(task.id),
        image=opts["image"],
        env=dict(task.env),
        user=task.user or None,
        netns=netns,
        hostname=alloc_hostname(task),
        extra_hosts=tuple(opts["extra_hosts"]),
        volumes=tuple(volumes),
        tmpfs=tuple(tmpfs),
        devices=tuple(_devices(task, opts)),
        read_only=opts["readonly_rootfs"],
        cap_add=tuple(opts["cap_add"]),
        cap_drop=tuple(opts["cap_drop"]),
        privileged=opts["privileged"],
        sysctls=dict(opts["sysctl"]),
        labels=dict(opts["labels"]),
        runtime=opts["runtime"] or plugin.default_runtime or None,
        **_output(task),
        **_cgroups(task),
        **_dns(task),
        **_process(opts),
        **_resources(task, opts),
    )
