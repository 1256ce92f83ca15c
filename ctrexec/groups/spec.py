"""Group files: the TOML that describes a group, checked whole before any side effect.

A file names the group, its network, hostname and published ports, and one ``[[task]]``
table per task (a TaskConfig's keys). :func:`parse_group` checks all of it, the tasks'
configs included, so ``group up`` of a bad file makes nothing and says which file,
task, key and value are wrong. Bringing a group up and down is :mod:`ctrexec.groups.updown`.

The file is one way to make a :class:`GroupSpec`; :meth:`GroupSpec.of` makes the same
value from TaskConfigs, with the same checks. Either way a task is held as its own
TaskConfig (named by its short name, joined to nothing), so a group made from code and
then from its file is one definition: same members, same :meth:`GroupSpec.digest`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.ids import validate_id
from ctrexec.net import groupns
from ctrexec.net.networks import parse_mode, parse_port
from ctrexec.oci.namespaces import with_hostname
from ctrexec.tasks import envfile, fields
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

_GROUP_KEYS = {"name", "network", "hostname", "ports", "task"}
_TASK_KEYS = {
    "name", "image", "command", "entrypoint", "env", "workdir", "user", "volumes", "tmpfs",
    "mounts",    "read_only", "memory", "cpus", "cpu_shares", "pids_limit", "cap_add", "cap_drop",
    "stop_signal", "stop_timeout", "restart", "labels", "sysctls", "runtime",
    "log_driver", "log_max_size", "log_max_files", "log_transport", "hostname",
    "extra_hosts", "dns", "dns_search", "dns_options", "env_file", "init",
    "memory_swap", "shm_size", "ulimits", "group_add", "security_opt",
    "pid", "ipc", "platform",
}  # fmt: skip


#: What the group sets on each member: a task that sets one of these is refused.
_GROUP_OWNS = {
    "netns": "the group's tasks share its network namespace: set the group's network instead",
    "group": "a task belongs to the group it is listed in",
}


@attrs.frozen(kw_only=True)
class GroupSpec:
    """A checked group: its network, hostname, published ports and tasks.

    Make one with :meth:`of` (from TaskConfigs) or :func:`parse_group` /
    :func:`load_group_file` (from a group file); both check it whole. Each of
    ``tasks`` is the member as written, named by its short name; :meth:`task_configs`
    joins them to the group.
    """

    name: str
    network: str = "bridge"
    hostname: str | None = None
    ports: tuple[str, ...] = ()
    tasks: tuple[TaskConfig, ...] = ()

    @classmethod
    def of(
        cls,
        name: str,
        tasks: Iterable[TaskConfig],
        *,
        network: str = "bridge",
        hostname: str | None = None,
        ports: Iterable[str] = (),
    ) -> GroupSpec:
        """The group ``name`` of ``tasks``, checked as :func:`parse_group` checks a file.

        Each task's ``name`` is its short name (the member's ID is ``NAME-TASK``), as a
        ``[[task]]`` table's is; a task's ``hostname`` wins over the group's. A task
        may set only what a ``[[task]]`` table can: the group owns its namespace.
        An error is one line that begins ``group NAME:`` and names the task and field.
        """
        source = f"group {name}" if isinstance(name, str) else "group"
        try:
            return _checked(name, network, hostname, fields.to_tuple(ports), tuple(tasks))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{source}: {exc}") from exc

    @property
    def netns_name(self) -> str:
        return groupns.netns_name(self.name)

    @property
    def netns_path(self) -> str:
        return groupns.netns_path(self.name)

    def digest(self) -> str:
        """A stable hash of the definition, to tell a restart from a second group.

        A task counts by the fields it sets (those not at their default), so a group
        made from TaskConfigs hashes as its file does, and a simple file hashes as its
        raw tables did before tasks were TaskConfigs.
        """
        data = {
            "name": self.name,
            "network": self.network,
            "hostname": self.hostname,
            "ports": list(self.ports),
            "tasks": [_set_fields(task) for task in self.tasks],
        }
        text = json.dumps(data, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def task_id(self, task_name: str) -> str:
        return f"{self.name}-{task_name}"

    def task_configs(self) -> list[TaskConfig]:
        """One TaskConfig per task, joined to the group's namespace and shim."""
        return [self.task_config(t) for t in self.tasks]

    def task_config(self, task: TaskConfig) -> TaskConfig:
        """``task`` as the group runs it: its ID, the group's namespace and hostname."""
        return attrs.evolve(
            task,
            name=self.task_id(task.name),
            netns=self.netns_path,
            group=self.name,
            hostname=task.hostname or self.hostname or self.name,  # a task's own wins
        )


def _set_fields(task: TaskConfig) -> dict[str, Any]:
    """The fields ``task`` sets, as plain data (a RestartPolicy as its table)."""
    return attrs.asdict(task, filter=lambda f, v: v != _default(f))


def _default(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    factory = getattr(default, "factory", None)  # an attrs.Factory (its stub is no class)
    return factory() if factory is not None else default


def _unknown(keys: set[str], allowed: set[str]) -> None:
    extra = sorted(keys - allowed)
    if extra:
        raise InvalidArgument(
            f"unknown key(s) {', '.join(extra)}; expected {', '.join(sorted(allowed))}"
        )


def parse_group(
    data: Mapping[str, Any], *, source: str = "group", base: StrPath | None = None
) -> GroupSpec:
    """Validate a group definition before any side effect.

    An error is one line that names ``source`` (the file), the task, the key, the
    value and what was expected: ``group file g.toml: task web: cpus = '2': expected
    a number``. A task's ``env_file`` paths are read here, relative to ``base`` (the
    file's directory; else the current one), so the spec holds the variables: a file
    edited between two ``group up`` is a changed definition.
    """
    try:
        return _parse_group(data, None if base is None else Path(base))
    except InvalidArgument as exc:
        raise InvalidArgument(f"{source}: {exc}") from exc


def _parse_group(data: Mapping[str, Any], base: Path | None) -> GroupSpec:
    _unknown(set(data), _GROUP_KEYS)
    if "name" not in data:
        raise InvalidArgument("'name' is required")
    name, network = data["name"], data.get("network", "bridge")
    hostname, ports = data.get("hostname"), fields.to_tuple(data.get("ports", ()))
    _check_group(name, network, hostname, ports)
    raw_tasks = data.get("task")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise InvalidArgument("at least one [[task]] table is required")
    where = [_where(task, i) for i, task in enumerate(raw_tasks)]
    tasks = []
    for label, task in zip(where, raw_tasks, strict=True):
        try:
            tasks.append(_task_of(_with_env_files(task, base)))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{label}: {exc}") from exc
    return _checked(name, network, hostname, ports, tuple(tasks))


def _check_group(name: Any, network: Any, hostname: Any, ports: Any) -> None:
    """The group's own keys, in a file's words (``ports = ...: expected ...``)."""
    fields.check("name", name, (str,), "a string", _group_name)
    fields.check("network", network, (str,), "a string", parse_mode)
    if hostname is not None:
        fields.check("hostname", hostname, (str,), "a string", with_hostname)
    fields.check("ports", ports, (tuple,), "a list of strings", _ports)
    if ports and parse_mode(network).kind in ("none", "host"):
        raise InvalidField("ports", ports, "ports need network 'bridge' or 'cni:NAME'")


def _task_of(task: Any) -> TaskConfig:
    """A ``[[task]]`` table's member config: its keys known, its name a task's."""
    if not isinstance(task, dict):
        raise InvalidArgument("expected a [[task]] table")
    _unknown(set(task), _TASK_KEYS)
    for key in ("name", "image"):
        if key not in task:
            raise InvalidArgument(f"'{key}' is required")
    fields.check("name", task["name"], (str,), "a string", _task_name)
    return TaskConfig(**task)


def _checked(
    name: Any, network: Any, hostname: Any, ports: Any, tasks: tuple[Any, ...]
) -> GroupSpec:
    """The group, every check it can have without a daemon made, its tasks' included."""
    _check_group(name, network, hostname, ports)
    if not tasks:
        raise InvalidArgument("at least one task is required")
    spec = GroupSpec(name=name, network=network, hostname=hostname, ports=ports, tasks=tasks)
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        label = f"task {task.name if isinstance(task, TaskConfig) else index + 1}"
        try:
            _check_task(spec, task, seen)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{label}: {exc}") from exc
    return spec


def _where(task: Any, index: int) -> str:
    label = task.get("name") if isinstance(task, dict) else None
    return f"task {label if isinstance(label, str) else index + 1}"


def _with_env_files(task: Any, base: Path | None) -> Any:
    """A task whose ``env_file`` (a path or a list of them) is read into its ``env``,
    under which the task's own ``env`` wins, as ``-e`` over ``--env-file``."""
    if not isinstance(task, dict) or "env_file" not in task:
        return task
    values = dict(task)
    given = values.pop("env_file")
    files = (given,) if isinstance(given, str) else fields.to_tuple(given)
    if not isinstance(files, tuple) or not all(isinstance(f, str) for f in files):
        raise InvalidField("env_file", given, "expected a path or a list of paths")
    with fields.naming("env_file", given):
        env = envfile.read_env_files(files, os.environ, base=base)
    own = fields.to_string_map(values.get("env", {}))
    values["env"] = {**env, **own} if isinstance(own, Mapping) else own
    return values


def _group_name(name: str) -> None:
    validate_id(name, kind="group name")
    groupns.netns_name(name)  # its namespace's name must be valid too


def _ports(ports: tuple[Any, ...]) -> None:
    for p in ports:
        parse_port(p)


def _check_task(spec: GroupSpec, task: Any, seen: set[str]) -> None:
    """Every check a task can have without a daemon, the TaskConfig's included."""
    if not isinstance(task, TaskConfig):
        raise InvalidArgument(f"expected a TaskConfig, not {type(task).__name__}")
    fields.check("name", task.name, (str,), "a string", _task_name)
    for field in attrs.fields(TaskConfig):
        value = getattr(task, field.name)
        if field.name not in _TASK_KEYS and value != _default(field):
            why = _GROUP_OWNS.get(field.name, "a group's task cannot set it (no [[task]] key)")
            raise InvalidField(field.name, value, why)
    if task.name in seen:
        raise InvalidField("name", task.name, "another task of the group has this name")
    seen.add(task.name)
    taskspec.check_config(spec.task_config(task))


def _task_name(name: str) -> None:
    validate_id(name, kind="task name")


def load_group_file(path: StrPath) -> GroupSpec:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise InvalidArgument(f"group file {path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"cannot read group file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"group file {path} is not valid TOML: {exc}") from exc
    return parse_group(data, source=f"group file {path}", base=Path(path).parent)
