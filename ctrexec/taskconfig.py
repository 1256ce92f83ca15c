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

from ctrexec import fields, logmodes
from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.ids import validate_id
from ctrexec.logdriver import check_limits
from ctrexec.oci import caps, namespaces, process, resources
from ctrexec.oci.spec import with_annotations
from ctrexec.oci.user import split_user_spec

DEFAULT_STOP_TIMEOUT = 10.0
DEFAULT_LOG_MAX_SIZE = 10 * 1024 * 1024
DEFAULT_LOG_MAX_FILES = 3


_RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")


def _policy(value: str) -> None:
    if value not in _RESTART_POLICIES:
        raise InvalidArgument(f"expected one of {', '.join(_RESTART_POLICIES)}")


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """When ``ctrexec supervise`` restarts a task: ``no``, ``on-failure`` or ``always``."""

    policy: str = attrs.field(default="no", validator=fields.text(_policy))
    max_attempts: int = attrs.field(default=0, validator=fields.integer(fields.non_negative))
    delay: float = attrs.field(default=1.0, validator=fields.number(fields.non_negative))


def _restart(value: Any) -> Any:
    """A table (from JSON or TOML) becomes a RestartPolicy, its errors named ``restart.*``."""
    if not isinstance(value, Mapping):
        return value
    known = [f.name for f in attrs.fields(RestartPolicy)]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise InvalidField(
            "restart",
            dict(value),
            f"unknown key(s) {', '.join(unknown)}; expected {', '.join(known)}",
        )
    try:
        return RestartPolicy(**value)
    except InvalidField as exc:
        raise InvalidField(f"restart.{exc.field}", exc.value, exc.reason) from exc


def _non_empty(value: str) -> None:
    if not value:
        raise InvalidArgument("must not be empty")


def _signal_text(value: Any) -> Any:
    """``stop_signal = 9`` in TOML means signal 9, kept as the text ``"9"``."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _env(env: Mapping[str, str]) -> None:
    bad = [k for k in env if "=" in k]
    if bad:
        raise InvalidArgument(f"variable name {bad[0]!r} must not contain '='")
    process.merge_env([], env)


@attrs.frozen(kw_only=True)
class TaskConfig:
    """Everything needed to create and run one task.

    ``netns`` is a name (``/run/netns/NAME``), an absolute path, ``host`` (explicit
    host networking) or ``none`` (a fresh namespace with only loopback).

    Making one checks every field's type and every range that needs only the value
    (:mod:`ctrexec.fields`), so a bad value fails here with its field named, never
    later as a TypeError. What needs the host or parses into mounts (the runtime,
    volumes, tmpfs, devices, the stop signal) is checked by ``taskspec.check_config``.
    """

    name: str = attrs.field(validator=fields.text(lambda v: validate_id(v, kind="container name")))
    image: str = attrs.field(validator=fields.text(_non_empty))
    command: tuple[str, ...] | None = attrs.field(
        default=None, converter=fields.to_opt_tuple, validator=fields.strings(optional=True)
    )
    entrypoint: tuple[str, ...] | None = attrs.field(
        default=None, converter=fields.to_opt_tuple, validator=fields.strings(optional=True)
    )
    env: Mapping[str, str] = attrs.field(
        factory=dict, converter=fields.to_string_map, validator=fields.string_map(_env)
    )
    workdir: str | None = attrs.field(
        default=None, validator=fields.text(process.with_cwd, optional=True)
    )
    user: str | None = attrs.field(
        default=None, validator=fields.text(split_user_spec, optional=True)
    )
    netns: str = attrs.field(default="none", validator=fields.text())
    hostname: str | None = attrs.field(
        default=None, validator=fields.text(namespaces.with_hostname, optional=True)
    )
    volumes: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    tmpfs: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    read_only: bool = attrs.field(default=False, validator=fields.boolean())
    memory: str | int | None = attrs.field(
        default=None,
        validator=fields.field(
            (str, int), "a size such as 512m", resources.check_memory_limit, optional=True
        ),
    )
    cpus: float | None = attrs.field(
        default=None, validator=fields.number(resources.with_cpus, optional=True)
    )
    cpu_shares: int | None = attrs.field(
        default=None, validator=fields.integer(resources.with_cpu_shares, optional=True)
    )
    cpuset_cpus: str | None = attrs.field(
        default=None,
        validator=fields.text(lambda v: resources.check_cpu_list(v, "cpuset cpus"), optional=True),
    )
    pids_limit: int | None = attrs.field(
        default=None, validator=fields.integer(resources.with_pids_limit, optional=True)
    )
    cap_add: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(caps.expand_capabilities)
    )
    cap_drop: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(caps.expand_capabilities)
    )
    privileged: bool = attrs.field(default=False, validator=fields.boolean())
    devices: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    sysctls: Mapping[str, str] = attrs.field(
        factory=dict,
        converter=fields.to_string_map,
        validator=fields.string_map(namespaces.with_sysctls),
    )
    oom_score_adj: int | None = attrs.field(
        default=None, validator=fields.integer(process.with_oom_score_adj, optional=True)
    )
    annotations: Mapping[str, str] = attrs.field(
        factory=dict, converter=fields.to_string_map, validator=fields.string_map(with_annotations)
    )
    labels: Mapping[str, str] = attrs.field(
        factory=dict,
        converter=fields.to_string_map,
        validator=fields.string_map(lbl.validate_user_labels),
    )
    #: docker's ``-t`` and ``-i``: a pseudo-terminal, an open stdin. Either makes the
    #: task interactive: its stdio is FIFOs for ``attach``, not the log driver.
    tty: bool = attrs.field(default=False, validator=fields.boolean())
    stdin_open: bool = attrs.field(default=False, validator=fields.boolean())
    group: str | None = attrs.field(
        default=None,
        validator=fields.text(lambda v: validate_id(v, kind="group name"), optional=True),
    )
    share_shim: bool = attrs.field(default=True, validator=fields.boolean())
    runtime: str | None = attrs.field(default=None, validator=fields.text(optional=True))
    stop_signal: str | None = attrs.field(
        default=None,
        converter=_signal_text,
        validator=fields.text(optional=True),
    )
    stop_timeout: float = attrs.field(
        default=DEFAULT_STOP_TIMEOUT, validator=fields.number(fields.non_negative)
    )
    log_driver: str = attrs.field(
        default=logmodes.DEFAULT_DRIVER, validator=fields.text(logmodes.check_driver)
    )
    log_max_size: int = attrs.field(
        default=DEFAULT_LOG_MAX_SIZE, validator=fields.integer(lambda v: check_limits(v, 1))
    )
    log_max_files: int = attrs.field(
        default=DEFAULT_LOG_MAX_FILES, validator=fields.integer(lambda v: check_limits(1, v))
    )
    snapshotter: str = attrs.field(
        default="overlayfs", validator=fields.text(lambda v: validate_id(v, kind="snapshotter"))
    )
    auto_remove: bool = attrs.field(default=False, validator=fields.boolean())
    restart: RestartPolicy = attrs.field(
        factory=RestartPolicy,
        converter=_restart,
        validator=fields.field((RestartPolicy,), "a table with policy, max_attempts, delay"),
    )

    def __attrs_post_init__(self) -> None:
        """Only ``json-file`` rotates: limits given to another driver would be ignored."""
        if "rotation" in logmodes.FEATURES[self.log_driver]:
            return
        for name, default in (
            ("log_max_size", DEFAULT_LOG_MAX_SIZE),
            ("log_max_files", DEFAULT_LOG_MAX_FILES),
        ):
            if getattr(self, name) != default:
                raise InvalidField(
                    name, getattr(self, name), f"the {self.log_driver} log driver does not rotate"
                )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=_serialize)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskConfig:
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidArgument(f"unknown task config keys: {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required key is missing
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
