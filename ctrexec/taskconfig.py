"""The values schedulers exchange with the executor: config in, handle and info out.

All of them are frozen attrs classes with ``to_json``/``from_json``, so a scheduler
can persist a :class:`TaskHandle` and a later process can :meth:`Executor.recover`
from it. Mounts, tmpfs and devices keep docker's string syntax (``SRC:DST:ro``), which
is what users write and what round-trips through JSON without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from ctrexec.errors import InvalidArgument
from ctrexec.tasks import ExitStatus, Status

DEFAULT_STOP_TIMEOUT = 10.0
DEFAULT_LOG_MAX_SIZE = 10 * 1024 * 1024
DEFAULT_LOG_MAX_FILES = 3


def _strs(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise InvalidArgument(f"expected a list of strings, got the string {value!r}")
    return tuple(str(v) for v in value)


def _opt_strs(value: Any) -> tuple[str, ...] | None:
    return None if value is None else _strs(value)


def _mapping(value: Any) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in dict(value or {}).items()}


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """When ``ctrexec supervise`` restarts a task: ``no``, ``on-failure`` or ``always``."""

    policy: str = attrs.field(default="no")
    max_attempts: int = 0
    delay: float = 1.0

    @policy.validator
    def _check(self, _a: object, value: str) -> None:
        if value not in ("no", "on-failure", "always", "unless-stopped"):
            raise InvalidArgument(f"unknown restart policy {value!r}")


@attrs.frozen(kw_only=True)
class TaskConfig:
    """Everything needed to create and run one task.

    ``netns`` is a name (``/run/netns/NAME``), an absolute path, ``host`` (explicit
    host networking) or ``none`` (a fresh namespace with only loopback).
    """

    name: str
    image: str
    command: tuple[str, ...] | None = attrs.field(default=None, converter=_opt_strs)
    entrypoint: tuple[str, ...] | None = attrs.field(default=None, converter=_opt_strs)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping)
    workdir: str | None = None
    user: str | None = None
    netns: str = "none"
    hostname: str | None = None
    volumes: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    tmpfs: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    read_only: bool = False
    memory: str | int | None = None
    cpus: float | None = None
    cpu_shares: int | None = None
    cpuset_cpus: str | None = None
    pids_limit: int | None = None
    cap_add: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    cap_drop: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    privileged: bool = False
    devices: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    sysctls: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping)
    oom_score_adj: int | None = None
    annotations: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping)
    labels: Mapping[str, str] = attrs.field(factory=dict, converter=_mapping)
    tty: bool = False
    group: str | None = None
    share_shim: bool = True
    runtime: str | None = None
    stop_signal: str | None = None
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    log_max_size: int = DEFAULT_LOG_MAX_SIZE
    log_max_files: int = DEFAULT_LOG_MAX_FILES
    snapshotter: str = "overlayfs"
    auto_remove: bool = False
    restart: RestartPolicy = attrs.field(factory=RestartPolicy)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=_serialize)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskConfig:
        fields = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise InvalidArgument(f"unknown task config keys: {', '.join(unknown)}")
        values = dict(data)
        if isinstance(values.get("restart"), Mapping):
            values["restart"] = RestartPolicy(**values["restart"])
        try:
            return cls(**values)
        except TypeError as exc:
            raise InvalidArgument(f"invalid task config: {exc}") from exc


def _serialize(_inst: object, _field: object, value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


@attrs.frozen(kw_only=True)
class TaskHandle:
    """What a scheduler keeps to find a task again, even from another process."""

    id: str
    namespace: str
    address: str
    pid: int
    started_at: datetime
    netns_path: str | None
    log_path: str
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["started_at"] = self.started_at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskHandle:
        try:
            values = dict(data)
            values["started_at"] = datetime.fromisoformat(values["started_at"])
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"invalid task handle: {exc}") from exc


@attrs.frozen(kw_only=True)
class TaskInfo:
    """``inspect``: the record plus the live state."""

    id: str
    image: str
    status: Status
    pid: int
    exit: ExitStatus | None
    netns_path: str | None
    netns_mode: str
    group: str | None
    log_path: str
    labels: Mapping[str, str]
    created_at: datetime | None
    config: TaskConfig | None

    @property
    def oom_killed(self) -> bool:
        """Docker's ``State.OOMKilled``: the last exit was the OOM killer's SIGKILL."""
        return self.exit is not None and self.exit.oom_killed

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "image": self.image,
            "status": self.status.value,
            "pid": self.pid,
            "exit": self.exit.to_json() if self.exit else None,
            "oom_killed": self.oom_killed,
            "netns_path": self.netns_path,
            "netns_mode": self.netns_mode,
            "group": self.group,
            "log_path": self.log_path,
            "labels": dict(self.labels),
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "config": self.config.to_json() if self.config else None,
        }


@attrs.frozen
class ExecResult:
    """The outcome of an exec'd process, with its captured output."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""
