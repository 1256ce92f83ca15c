"""Groups: one network namespace plus its tasks, described in a TOML file.

A group is what a scheduler calls an allocation. ``up`` creates (or, after a crash,
finds again) the namespace, wires it, and starts every task; ``down`` stops and
deletes the tasks, runs CNI DEL, and removes the namespace. Nothing is stored
outside containerd's labels, the pinned netns file and CNI's own cache, so ``up``
after a crash reuses the surviving namespace and address instead of allocating again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import Status
from ctrexec.errors import (
    AlreadyExists,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    InvalidField,
)
from ctrexec.ids import validate_id
from ctrexec.images import lookup
from ctrexec.net import hostfiles, netns
from ctrexec.net.networks import Networks, parse_mode, parse_port
from ctrexec.oci.namespaces import with_hostname
from ctrexec.tasks import fields, teardown
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig, TaskInfo
from ctrexec.tasks.executor import Executor

NETNS_PREFIX = "cx-"
_GROUP_KEYS = {"name", "network", "hostname", "ports", "task"}
_TASK_KEYS = {
    "name", "image", "command", "entrypoint", "env", "workdir", "user", "volumes", "tmpfs",
    "read_only", "memory", "cpus", "cpu_shares", "pids_limit", "cap_add", "cap_drop",
    "stop_signal", "stop_timeout", "restart", "labels", "sysctls", "runtime",
    "log_driver", "log_max_size", "log_max_files", "log_transport", "hostname",
    "extra_hosts", "dns", "dns_search", "dns_options",
}  # fmt: skip


@attrs.frozen(kw_only=True)
class GroupSpec:
    """A parsed group file."""

    name: str
    network: str = "bridge"
    hostname: str | None = None
    ports: tuple[str, ...] = ()
    tasks: tuple[Mapping[str, Any], ...] = ()

    @property
    def netns_name(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def netns_path(self) -> str:
        return netns.resolve(self.netns_name)

    def digest(self) -> str:
        """A stable hash of the definition, to tell a restart from a second group."""
        data = json.dumps(attrs.asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(data.encode()).hexdigest()[:16]

    def task_id(self, task_name: str) -> str:
        return f"{self.name}-{task_name}"

    def task_configs(self) -> list[TaskConfig]:
        """One TaskConfig per task, joined to the group's namespace and shim."""
        return [self.task_config(t) for t in self.tasks]

    def task_config(self, task: Mapping[str, Any]) -> TaskConfig:
        values = {"hostname": self.hostname or self.name, **task}  # a task's own wins
        return TaskConfig(
            name=self.task_id(values.pop("name")),
            netns=self.netns_path,
            group=self.name,
            **values,
        )


def _unknown(keys: set[str], allowed: set[str]) -> None:
    extra = sorted(keys - allowed)
    if extra:
        raise InvalidArgument(
            f"unknown key(s) {', '.join(extra)}; expected {', '.join(sorted(allowed))}"
        )


def parse_group(data: Mapping[str, Any], *, source: str = "group") -> GroupSpec:
    """Validate a group definition before any side effect.

    An error is one line that names ``source`` (the file), the task, the key, the
    value and what was expected: ``group file g.toml: task web: cpus = '2': expected
    a number``.
    """
    try:
        return _parse_group(data)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{source}: {exc}") from exc


def _parse_group(data: Mapping[str, Any]) -> GroupSpec:
    _unknown(set(data), _GROUP_KEYS)
    if "name" not in data:
        raise InvalidArgument("'name' is required")
    name = data["name"]
    fields.check("name", name, (str,), "a string", _group_name)
    network = data.get("network", "bridge")
    fields.check("network", network, (str,), "a string", parse_mode)
    hostname = data.get("hostname")
    if hostname is not None:
        fields.check("hostname", hostname, (str,), "a string", with_hostname)
    ports = fields.to_tuple(data.get("ports", ()))
    fields.check("ports", ports, (tuple,), "a list of strings", _ports)
    if ports and parse_mode(network).kind in ("none", "host"):
        raise InvalidField("ports", ports, "ports need network 'bridge' or 'cni:NAME'")
    raw_tasks = data.get("task")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise InvalidArgument("at least one [[task]] table is required")
    spec = GroupSpec(
        name=name, network=network, hostname=hostname, ports=ports, tasks=tuple(raw_tasks)
    )
    seen: set[str] = set()
    for i, task in enumerate(raw_tasks):
        label = task.get("name") if isinstance(task, dict) else None
        where = f"task {label if isinstance(label, str) else i + 1}"
        try:
            _check_task(spec, task, seen)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from exc
    return spec


def _group_name(name: str) -> None:
    validate_id(name, kind="group name")
    netns.validate_name(NETNS_PREFIX + name)


def _ports(ports: tuple[Any, ...]) -> None:
    for p in ports:
        parse_port(p)


def _check_task(spec: GroupSpec, task: Any, seen: set[str]) -> None:
    """Every check a task can have without a daemon, the TaskConfig's included."""
    if not isinstance(task, dict):
        raise InvalidArgument("expected a [[task]] table")
    _unknown(set(task), _TASK_KEYS)
    for key in ("name", "image"):
        if key not in task:
            raise InvalidArgument(f"'{key}' is required")
    fields.check("name", task["name"], (str,), "a string", _task_name)
    if task["name"] in seen:
        raise InvalidField("name", task["name"], "another task of the group has this name")
    seen.add(task["name"])
    taskspec.check_config(spec.task_config(task))


def _task_name(name: str) -> None:
    validate_id(name, kind="task name")


def _members(spec: GroupSpec, configs: list[TaskConfig]) -> str:
    """The group's tasks as the label :data:`~ctrexec.labels.GROUP_MEMBERS` lists them."""
    return hostfiles.format_members(
        [
            hostfiles.Member(cfg.name, task["name"], cfg.hostname or spec.name)
            for task, cfg in zip(spec.tasks, configs, strict=True)
        ]
    )


def load_group_file(path: str | Path) -> GroupSpec:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise InvalidArgument(f"group file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read group file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"group file {path} is not valid TOML: {exc}") from exc
    return parse_group(data, source=f"group file {path}")


class Groups:
    """Group operations over one Executor and one Networks."""

    def __init__(self, executor: Executor, networks: Networks) -> None:
        self.executor = executor
        self.networks = networks

    def members(self, name: str) -> list[containers.Container]:
        return containers.list_containers(
            self.executor.client, containers.label_filter(lbl.GROUP, name)
        )

    def ps(self, name: str) -> list[TaskInfo]:
        return [i for i in self.executor.list(all_tasks=True) if i.group == name]

    def names(self) -> list[str]:
        found = {c.labels.get(lbl.GROUP, "") for c in self._managed()}
        return sorted(n for n in found if n)

    def _managed(self) -> list[containers.Container]:
        return containers.list_containers(
            self.executor.client, containers.label_filter(lbl.MANAGED, "true")
        )

    def up(self, spec: GroupSpec) -> list[TaskInfo]:
        """Create or recover the group, then make every task run."""
        digest = spec.digest()
        existing = self.members(spec.name)
        other = [c.id for c in existing if c.labels.get(lbl.GROUP_SPEC) != digest]
        if other:
            raise AlreadyExists(
                f"group {spec.name} already exists with another definition; run group down first"
            )
        mode = parse_mode(spec.network)
        ports = [parse_port(p) for p in spec.ports]
        configs = spec.task_configs()
        for cfg in configs:  # images first: a missing one stops everything, untouched
            lookup.ensure_image(self.executor.client, cfg.image, snapshotter=cfg.snapshotter)
        fresh = not existing and not Path(spec.netns_path).exists()
        made: list[str] = []
        try:
            ns = netns.create(spec.netns_name, exist_ok=True)
            attachment = self.networks.setup(spec.name, ns.path, mode, ports)
            # What every member's /etc/hosts says (see ctrexec.tasks.files).
            shared = {lbl.GROUP_MEMBERS: _members(spec, configs)}
            if attachment.addresses():
                shared[lbl.ADDRESSES] = ",".join(attachment.addresses())
            have = {c.id for c in existing}
            for cfg in configs:
                if cfg.name not in have:
                    self._create_member(cfg, digest, spec, shared)
                    made.append(cfg.name)
                state = self.executor.inspect(cfg.name, addresses=False)
                if state.status not in (Status.RUNNING, Status.PAUSED):
                    self.executor.start(cfg.name)
        except BaseException:
            for task_id in made:
                with contextlib.suppress(CtrexecError):
                    self.executor.destroy(task_id, force=True)
            if fresh:
                self._teardown_network(spec.name, spec.netns_path, spec.network)
            raise
        return self.ps(spec.name)

    def _create_member(
        self, cfg: TaskConfig, digest: str, spec: GroupSpec, shared: Mapping[str, str]
    ) -> None:
        owned = {lbl.GROUP_SPEC: digest, lbl.NETWORK_MODE: spec.network, **shared}
        if spec.ports:  # what TaskInfo.ports says, without reading CNI's cache
            owned[lbl.GROUP_PORTS] = ",".join(spec.ports)
        self.executor.create(cfg, owner_labels=owned)

    def down(self, name: str, *, timeout: float | None = None) -> None:
        """Stop (stop signal, then SIGKILL after the timeout) and remove everything."""
        validate_id(name, kind="group name")
        members = self.members(name)
        path = netns.resolve(NETNS_PREFIX + name)
        has_network = any(a.owner == name for a in self.networks.attachments())
        if not members and not Path(path).exists() and not has_network:
            raise FailedPrecondition(f"group {name} does not exist")
        modes = {c.labels.get(lbl.NETWORK_MODE, "bridge") for c in members}
        teardown.stop_and_destroy(self.executor, [c.id for c in members], timeout=timeout)
        for a in self.networks.attachments():
            if a.owner == name:
                modes.add(a.mode)
        for mode in modes or {"none"}:
            self._teardown_network(name, path, mode)

    def _teardown_network(self, name: str, path: str, mode: str) -> None:
        teardown_network(self.networks, self.executor.files_dir, name, path, mode)


def teardown_network(networks: Networks, files_dir: Path, name: str, path: str, mode: str) -> None:
    """CNI DEL first (it needs the namespace to remove masquerade rules), then the rest."""
    networks.teardown(name, path if Path(path).exists() else None, parse_mode(mode))
    hostfiles.remove_legacy(path, base=files_dir)  # from before per-task files
    with contextlib.suppress(CtrexecError):
        netns.remove(path)
