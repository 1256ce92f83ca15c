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

from ctrexec import containers, hostfiles, images, netns, taskspec
from ctrexec import labels as lbl
from ctrexec.errors import AlreadyExists, CtrexecError, FailedPrecondition, InvalidArgument
from ctrexec.executor import Executor
from ctrexec.ids import validate_id
from ctrexec.networks import Networks, parse_mode, parse_port
from ctrexec.taskconfig import RestartPolicy, TaskConfig, TaskInfo
from ctrexec.tasks import Status

NETNS_PREFIX = "cx-"
_GROUP_KEYS = {"name", "network", "hostname", "ports", "task"}
_TASK_KEYS = {
    "name", "image", "command", "entrypoint", "env", "workdir", "user", "volumes", "tmpfs",
    "read_only", "memory", "cpus", "cpu_shares", "pids_limit", "cap_add", "cap_drop",
    "stop_signal", "stop_timeout", "restart", "labels", "sysctls", "runtime",
}  # fmt: skip
_RESTART_KEYS = {"policy", "max_attempts", "delay"}


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
        out = []
        for t in self.tasks:
            values = dict(t)
            name = values.pop("name")
            restart = values.pop("restart", None)
            labels = {**dict(values.pop("labels", {}) or {})}
            out.append(
                TaskConfig(
                    name=self.task_id(name),
                    netns=self.netns_path,
                    group=self.name,
                    hostname=self.hostname or self.name,
                    restart=RestartPolicy(**restart) if restart else RestartPolicy(),
                    labels=labels,
                    **values,
                )
            )
        return out


def _unknown(keys: set[str], allowed: set[str], where: str) -> None:
    extra = sorted(keys - allowed)
    if extra:
        raise InvalidArgument(f"{where}: unknown key(s) {', '.join(extra)}")


def parse_group(data: Mapping[str, Any]) -> GroupSpec:
    """Validate a group definition; every error names where it is."""
    _unknown(set(data), _GROUP_KEYS, "group")
    name = data.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("group: 'name' is required")
    validate_id(name, kind="group name")
    netns.validate_name(NETNS_PREFIX + name)
    network = str(data.get("network", "bridge"))
    mode = parse_mode(network)
    ports = tuple(str(p) for p in data.get("ports", []) or [])
    for p in ports:
        parse_port(p)
    if ports and mode.kind in ("none", "host"):
        raise InvalidArgument(f"group {name}: ports need network 'bridge' or 'cni:NAME'")
    raw_tasks = data.get("task", [])
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise InvalidArgument(f"group {name}: at least one [[task]] is required")
    seen: set[str] = set()
    tasks: list[dict[str, Any]] = []
    for i, t in enumerate(raw_tasks):
        if not isinstance(t, dict):
            raise InvalidArgument(f"group {name}: task {i} is not a table")
        where = f"group {name}, task {t.get('name', i)}"
        _unknown(set(t), _TASK_KEYS, where)
        if not isinstance(t.get("name"), str) or not isinstance(t.get("image"), str):
            raise InvalidArgument(f"{where}: 'name' and 'image' are required")
        if t["name"] in seen:
            raise InvalidArgument(f"{where}: duplicate task name")
        seen.add(t["name"])
        if isinstance(t.get("restart"), dict):
            _unknown(set(t["restart"]), _RESTART_KEYS, f"{where}, restart")
        tasks.append(dict(t))
    hostname = data.get("hostname")
    spec = GroupSpec(
        name=name,
        network=network,
        hostname=str(hostname) if hostname is not None else None,
        ports=ports,
        tasks=tuple(tasks),
    )
    for cfg in spec.task_configs():  # every task config check, before any side effect
        taskspec.check_config(cfg)
    return spec


def load_group_file(path: str | Path) -> GroupSpec:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise InvalidArgument(f"group file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read group file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"group file {path} is not valid TOML: {exc}") from exc
    return parse_group(data)


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
            images.ensure_image(self.executor.client, cfg.image, snapshotter=cfg.snapshotter)
        fresh = not existing and not Path(spec.netns_path).exists()
        made: list[str] = []
        try:
            ns = netns.create(spec.netns_name, exist_ok=True)
            attachment = self.networks.setup(spec.name, ns.path, mode, ports)
            hostfiles.ensure(
                ns.path,
                hostname=spec.hostname or spec.name,
                addresses=attachment.addresses(),
                base=self.executor.files_dir,
            )
            have = {c.id for c in existing}
            for cfg in configs:
                if cfg.name not in have:
                    self._create_member(cfg, digest, spec.network)
                    made.append(cfg.name)
                state = self.executor.inspect(cfg.name)
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

    def _create_member(self, cfg: TaskConfig, digest: str, network: str) -> None:
        self.executor.create(cfg, owner_labels={lbl.GROUP_SPEC: digest, lbl.NETWORK_MODE: network})

    def down(self, name: str, *, timeout: float | None = None) -> None:
        """Stop (stop signal, then SIGKILL after the timeout) and remove everything."""
        validate_id(name, kind="group name")
        members = self.members(name)
        path = netns.resolve(NETNS_PREFIX + name)
        has_network = any(a.owner == name for a in self.networks.attachments())
        if not members and not Path(path).exists() and not has_network:
            raise FailedPrecondition(f"group {name} does not exist")
        modes = {c.labels.get(lbl.NETWORK_MODE, "bridge") for c in members}
        for c in members:
            with contextlib.suppress(CtrexecError):
                self.executor.stop(c.id, timeout=timeout)
            self.executor.destroy(c.id, force=True)
        for a in self.networks.attachments():
            if a.owner == name:
                modes.add(a.mode)
        for mode in modes or {"none"}:
            self._teardown_network(name, path, mode)

    def _teardown_network(self, name: str, path: str, mode: str) -> None:
        """CNI DEL first (it needs the namespace to remove masquerade rules), then the rest."""
        self.networks.teardown(name, path if Path(path).exists() else None, parse_mode(mode))
        hostfiles.remove(path, base=self.executor.files_dir)
        with contextlib.suppress(CtrexecError):
            netns.remove(path)


def tasks_in_netns(executor: Executor, path: str) -> list[TaskInfo]:
    return [i for i in executor.list(all_tasks=True) if i.netns_path == path]


def remove_netns(executor: Executor, spec: str, *, force: bool = False) -> None:
    """``netns rm``: refuse while tasks run inside, unless forced (then stop them first)."""
    path = netns.resolve(spec)
    users = tasks_in_netns(executor, path)
    running = [i.id for i in users if i.status in (Status.RUNNING, Status.PAUSED)]
    if running and not force:
        raise FailedPrecondition(
            f"netns {spec} has running tasks ({', '.join(running)}); stop them or use --force"
        )
    for info in users:
        if force:
            with contextlib.suppress(CtrexecError):
                executor.stop(info.id)
    netns.remove(path)
