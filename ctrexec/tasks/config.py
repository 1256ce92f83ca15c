"""The values schedulers exchange with the executor: config in, handle and info out.

What comes back, a :class:`~ctrexec.tasks.reports.TaskHandle` and a
:class:`~ctrexec.tasks.reports.TaskInfo`, has a module of its own. All of them are
frozen attrs classes with ``to_json``/``from_json``, so a scheduler
can persist a :class:`TaskHandle` and a later process can :meth:`Executor.recover`
from it. Mounts, tmpfs and devices keep docker's string syntax (``SRC:DST:ro``), which
is what users write and what round-trips through JSON without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import defaults
from ctrexec import labels as lbl
from ctrexec.defaults import DEFAULT_LOG_MAX_FILES, DEFAULT_LOG_MAX_SIZE
from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.ids import validate_id
from ctrexec.logs import modes as logmodes
from ctrexec.logs.driver import check_limits
from ctrexec.oci import caps, namespaces, process, resources, secopts
from ctrexec.oci.spec import with_annotations
from ctrexec.oci.user import check_group_add, split_user_spec
from ctrexec.tasks import fields, requestsize

if TYPE_CHECKING:  # the network modules cost a CLI command that only reads configs
    from ctrexec.containerd import containers


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


def _absolute(value: str) -> None:
    if not value.startswith("/"):
        raise InvalidArgument("must be an absolute path")


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
    (:mod:`ctrexec.tasks.fields`), so a bad value fails here with its field named, never
    later as a TypeError. What needs the host or parses into mounts (the runtime,
    volumes, tmpfs, devices, the stop signal) is checked by ``taskspec.check_config``.
    """

    name: str = attrs.field(validator=fields.text(lambda v: validate_id(v, kind="container name")))
    image: str = attrs.field(validator=fields.text(_non_empty))
    #: docker's --platform: which of a multi-platform image's variants to run
    #: (``linux/arm64``); None, the host's.
    platform: str | None = attrs.field(
        default=None, validator=fields.text(fields.platform, optional=True)
    )
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
    #: docker's --group-add: more supplementary groups, names from the image's /etc/group.
    group_add: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(check_group_add)
    )
    netns: str = attrs.field(default="none", validator=fields.text())
    #: docker's --pid and --ipc: ``host`` shares the host's namespace (``ipc = "host"``
    #: also its /dev/shm); the default is the task's own.
    pid: str | None = attrs.field(
        default=None, validator=fields.text(namespaces.check_pid_mode, optional=True)
    )
    ipc: str | None = attrs.field(
        default=None, validator=fields.text(namespaces.check_ipc_mode, optional=True)
    )
    hostname: str | None = attrs.field(
        default=None, validator=fields.text(namespaces.with_hostname, optional=True)
    )
    #: docker's --dns, --dns-search, --dns-option: the task's resolv.conf instead of the
    #: host's (each task has its own, even in a namespace shared with others).
    dns: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(fields.nameservers)
    )
    dns_search: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    dns_options: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    #: docker's --add-host: ``NAME:IP`` lines added to the task's /etc/hosts.
    extra_hosts: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(fields.extra_hosts)
    )
    volumes: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    tmpfs: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    #: docker's --mount (``type=bind|volume|tmpfs,target=...``); parsed, with
    #: ``volumes``, by ``taskspec.check_config``.
    mounts: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings()
    )
    read_only: bool = attrs.field(default=False, validator=fields.boolean())
    memory: str | int | None = attrs.field(
        default=None,
        validator=fields.field(
            (str, int), "a size such as 512m", resources.check_memory_limit, optional=True
        ),
    )
    #: docker's --memory-reservation: a soft limit, kept below ``memory``.
    memory_reservation: str | int | None = attrs.field(
        default=None,
        validator=fields.field(
            (str, int), "a size such as 256m", resources.parse_size, optional=True
        ),
    )
    #: docker's --memory-swap: memory plus swap (a size, or -1 for unlimited swap); needs
    #: ``memory``, and is at least that.
    memory_swap: str | int | None = attrs.field(
        default=None,
        validator=fields.field(
            (str, int), "a size such as 1g, or -1", resources.parse_memory_swap, optional=True
        ),
    )
    #: docker's --shm-size: the size of /dev/shm (64m unless set).
    shm_size: str | int | None = attrs.field(
        default=None,
        validator=fields.field(
            (str, int), "a size such as 256m", resources.parse_shm_size, optional=True
        ),
    )
    #: docker's --ulimit, ``NAME=SOFT[:HARD]`` each (``nofile=1024:4096``).
    ulimits: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(process.check_ulimits)
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
    #: A cgroup of the caller's to run in instead of ctrexec's own
    #: (``/ctrexec/<namespace>/<id>``): a cgroupfs path from each hierarchy's root, such
    #: as the one Nomad's client made for the task. ctrexec never removes it (runc
    #: removes the directory it ran the task in when the task is deleted).
    cgroup: str | None = attrs.field(
        default=None, validator=fields.text(resources.check_cgroupfs_path, optional=True)
    )
    #: cgroup v1: a cgroup of the cpuset hierarchy (a path from its root) that the task's
    #: init process joins before it runs, with ``cpuset_cpus`` written to it when set;
    #: ``cgroup`` places it in every other hierarchy (how Nomad's exec driver runs its
    #: tasks in Nomad's cpuset partition).
    cpuset_cgroup: str | None = attrs.field(
        default=None, validator=fields.text(resources.check_cgroupfs_path, optional=True)
    )
    cap_add: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(caps.expand_capabilities)
    )
    cap_drop: tuple[str, ...] = attrs.field(
        default=(), converter=fields.to_tuple, validator=fields.strings(caps.expand_capabilities)
    )
    privileged: bool = attrs.field(default=False, validator=fields.boolean())
    #: docker's --security-opt: ``no-new-privileges[=true|false]``, ``seccomp=unconfined``,
    #: ``seccomp=PATH`` (a profile file, read when the task is created).
    security_opt: tuple[str, ...] = attrs.field(
        default=(),
        converter=fields.to_tuple,
        validator=fields.strings(secopts.parse_security_opts),
    )
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
    #: docker's ``--init``: an init (tini) as pid 1 that runs the task's argv, reaps
    #: orphans and forwards signals; the host's binary is found by ``check_config``.
    init: bool = attrs.field(default=False, validator=fields.boolean())
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
        default=defaults.DEFAULT_STOP_TIMEOUT, validator=fields.number(fields.non_negative)
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
    log_transport: str = attrs.field(
        default=logmodes.DAEMON, validator=fields.text(logmodes.check_transport)
    )
    #: Where the task's stdout and stderr go instead of a log (a scheduler's FIFOs, or
    #: files): the shim opens them itself, so output flows while the caller is away.
    stdout_path: str | None = attrs.field(
        default=None,
        converter=fields.text_or_none,
        validator=fields.text(logmodes.check_output_path, optional=True),
    )
    stderr_path: str | None = attrs.field(
        default=None,
        converter=fields.text_or_none,
        validator=fields.text(logmodes.check_output_path, optional=True),
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
    #: Where this task's log goes instead of the executor's ``log_dir`` (a scheduler's
    #: per-allocation directory): ``<log_dir>/<namespace>/<name>/task.log``, as there.
    log_dir: str | None = attrs.field(
        default=None, converter=fields.text_or_none, validator=fields.text(_absolute, optional=True)
    )

    @property
    def interactive(self) -> bool:
        """``-i``/``-t``: the output goes to an attached client, and to a log only with
        json-file through the shared daemon (which copies it to the client too)."""
        return self.tty or self.stdin_open

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (docker's ``HostConfig.Memory``); None for no limit."""
        return None if self.memory is None else resources.parse_size(self.memory)

    def __attrs_post_init__(self) -> None:
        """A swap limit needs a memory limit, and a removed container has nothing to
        restart, as docker's. Only ``json-file`` rotates:
        limits given to another driver would be ignored.

        Output sent to the caller's paths has no log driver at all. The fields
        together must fit in containerd's one request (:mod:`requestsize`).
        """
        requestsize.check((f.name, getattr(self, f.name)) for f in attrs.fields(type(self)))
        if self.auto_remove and self.restart.policy != "no":  # docker refuses it too
            reason = "a container removed at its exit has nothing to restart"
            raise InvalidField("restart", self.restart.policy, reason, conflicts_with="auto_remove")
        if self.memory_swap is not None and self.memory is None:
            raise InvalidField(
                "memory_swap",
                self.memory_swap,
                "You should always set the Memory limit when using Memoryswap limit, see usage",
            )
        if self.stdout_path is not None or self.stderr_path is not None:
            self._no_log_settings()
            return
        if "rotation" in logmodes.FEATURES[self.log_driver]:
            return
        for name, default in (
            ("log_max_size", DEFAULT_LOG_MAX_SIZE),
            ("log_max_files", DEFAULT_LOG_MAX_FILES),
            ("log_transport", logmodes.DAEMON),
        ):
            if getattr(self, name) != default:
                raise InvalidField(
                    name, getattr(self, name), f"the {self.log_driver} log driver does not rotate"
                )

    def _no_log_settings(self) -> None:
        for name, default in (
            ("log_driver", logmodes.DEFAULT_DRIVER),
            ("log_max_size", DEFAULT_LOG_MAX_SIZE),
            ("log_max_files", DEFAULT_LOG_MAX_FILES),
            ("log_transport", logmodes.DAEMON),
        ):
            if getattr(self, name) != default:
                raise InvalidField(
                    name, getattr(self, name), "a task with stdout_path or stderr_path keeps no log"
                )

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self, value_serializer=_serialize)

    def to_record(self) -> dict[str, Any]:
        """:meth:`to_json` without the fields left at their defaults: what the container
        record keeps. An older ctrexec refuses a key it does not know (it could not
        honour it), so a record names only what its task uses: a task that uses no
        newer field stays readable by an older ctrexec (a downgrade)."""
        data = self.to_json()
        for field in attrs.fields(type(self)):
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = None if default.takes_self else default.factory()
            if default is not attrs.NOTHING and getattr(self, field.name) == default:
                del data[field.name]
        return data

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


def config_of(record: containers.Container) -> TaskConfig | None:
    """The TaskConfig the record was made from; None for a record ctrexec cannot read."""
    data = record.extension_json(lbl.CONFIG_EXTENSION)
    if data is None:
        return None
    try:
        return TaskConfig.from_json(data)
    except InvalidArgument:
        return None


@attrs.frozen
class Listed:
    """What a listing shows of a record's config (``ps``'s COMMAND, LABELS and MOUNTS),
    read from its JSON with no TaskConfig made: making one checks every field, which
    cost ``ps`` about a millisecond a container (issue 40) for three fields it prints."""

    entrypoint: tuple[str, ...] | None
    command: tuple[str, ...] | None
    labels: Mapping[str, str]
    volumes: tuple[str, ...]


#: The keys a record's config may have: one with another is unreadable (:func:`config_of`).
_KEYS = frozenset(f.name for f in attrs.fields(TaskConfig))


def listed_of(record: containers.Container) -> Listed | None:
    """The listed fields of the record's config; None where :func:`config_of` finds no
    config for a record, or the fields are not of their types."""
    data = record.extension_json(lbl.CONFIG_EXTENSION)
    if not isinstance(data, dict) or not _KEYS.issuperset(data):
        return None
    labels = data.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        return None
    found = (data.get("entrypoint"), data.get("command"), data.get("volumes") or [])
    if not all(v is None or _is_strings(v) for v in found):
        return None
    entrypoint, command, volumes = (None if v is None else tuple(v) for v in found)
    return Listed(entrypoint, command, labels, volumes or ())


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
