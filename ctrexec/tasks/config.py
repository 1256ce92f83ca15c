"""The values schedulers exchange with the executor: config in, handle and info out.

All of them are frozen attrs classes with ``to_json``/``from_json``, so a scheduler
can persist a :class:`TaskHandle` and a later process can :meth:`Executor.recover`
from it. Mounts, tmpfs and devices keep docker's string syntax (``SRC:DST:ro``), which
is what users write and what round-trips through JSON without a schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import defaults
from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.defaults import DEFAULT_LOG_MAX_FILES, DEFAULT_LOG_MAX_SIZE
from ctrexec.errors import FailedPrecondition, InvalidArgument, InvalidField
from ctrexec.ids import validate_id
from ctrexec.logs import modes as logmodes
from ctrexec.logs.driver import check_limits
from ctrexec.oci import caps, namespaces, process, resources, secopts
from ctrexec.oci.mounts import Mount
from ctrexec.oci.spec import with_annotations
from ctrexec.oci.user import check_group_add, split_user_spec
from ctrexec.tasks import fields, requestsize
from ctrexec.tasks.fields import Problem

if TYPE_CHECKING:  # the network modules cost a CLI command that only reads configs
    from ctrexec.containerd import containers
    from ctrexec.net.cni import PortMapping
    from ctrexec.net.nsinfo import Address
    from ctrexec.paths import StrPath


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


@attrs.frozen(kw_only=True)
class TaskHandle:
    """What a scheduler keeps to find one run of a task again, even from another process.

    ``run`` numbers the container's starts (1 for the first; each start by hand or by
    the supervisor adds one), so a handle names a run, not just the container: after
    a restart, :meth:`Executor.recover` reports the exit of the handle's run and
    that a newer one exists. ``container_created_at`` is when containerd made the
    record, which tells the handle's container from a later one of the same name.
    A version 1 handle (no ``run``) is still read; its run is told by its pid.
    """

    id: str
    namespace: str
    address: str
    pid: int
    started_at: datetime
    netns_path: str | None
    log_path: str
    run: int = 0
    container_created_at: datetime | None = None
    version: int = 2

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["started_at"] = self.started_at.isoformat()
        data["container_created_at"] = (
            self.container_created_at.isoformat() if self.container_created_at else None
        )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskHandle:
        try:
            values = dict(data)
            values["started_at"] = datetime.fromisoformat(values["started_at"])
            created = values.get("container_created_at")
            if created is not None:
                values["container_created_at"] = datetime.fromisoformat(created)
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"invalid task handle: {exc}") from exc


@attrs.frozen(kw_only=True)
class TaskInfo:
    """``inspect``: the record plus the state of one run (the latest, unless it came
    from :meth:`Executor.recover` of an older handle: then ``newer_run`` is set).

    ``addresses`` are the task's namespace's addresses, loopback left out; None when
    they were not looked up (``list`` does not, unless asked: each costs a netlink
    dump in the namespace) or cannot be (host networking: they are the host's; a
    namespace that is gone). ``ports`` are the published ports of the task's group.
    ``started_at`` is when ctrexec started the run (None for a run started before runs
    were recorded), and ``restart_count`` the supervisor's restarts since the last
    start by hand. ``restarting``: the task exited and the supervisor has a restart
    of it scheduled (or retries one that failed: ``restart_error`` says why).
    ``args``, ``env``, ``workdir`` and ``hostname`` are what the task runs with, from
    its OCI spec: the image's defaults merged with the config's (docker's
    ``Config.Cmd``, ``Env``, ``WorkingDir``, ``Hostname``). ``problems``: what
    :mod:`ctrexec.tasks.health` found wrong around it (its group's namespace pin lost).
    ``exit_reason``: why the run ended when no exit was seen (``host restarted``).
    ``unknown_reason``: why ``status`` is UNKNOWN: the task is there, but its shim did
    not answer for its state in time (it may well run; nothing restarts it).
    """

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
    run: int = 0
    started_at: datetime | None = None
    restart_count: int = 0
    restarting: bool = False
    restart_error: str | None = None
    ports: tuple[PortMapping, ...] = ()
    addresses: tuple[Address, ...] | None = None
    newer_run: int | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    workdir: str = ""
    hostname: str = ""
    problems: tuple[Problem, ...] = ()
    exit_reason: str | None = None
    unknown_reason: str | None = None
    #: The image's ID (``sha256:...``) the container was made from; "" for a record
    #: made before ctrexec kept it.
    image_id: str = ""
    #: The spec's mounts at the paths the config's ``-v`` and ``--mount`` name, in the
    #: spec's order: docker's ``inspect`` ``.Mounts``, with their host sources.
    mounts: tuple[Mount, ...] = ()

    @property
    def oom_killed(self) -> bool:
        """Docker's ``State.OOMKilled``: the last exit was the OOM killer's SIGKILL."""
        return self.exit is not None and self.exit.oom_killed

    @property
    def exit_code(self) -> int | None:
        return self.exit.exit_code if self.exit else None

    @property
    def done(self) -> bool:
        """The run exited and the restart policy starts the task no more (the supervisor's
        rule, read from the same labels): what a scheduler waits for before it calls a
        job over. False while a restart is due, for an exit the policy restarts (also
        while no supervisor serves it), for a run whose exit was not seen, and for an
        older run than the latest."""
        from ctrexec.tasks import restarts  # here: the CLI's verbs load TaskInfo, not this

        return (
            self.status is Status.STOPPED
            and self.exit is not None
            and self.newer_run is None
            and not self.restarting
            and not restarts.should_restart(self.labels, self.exit.exit_code)
        )

    @property
    def finished_at(self) -> datetime | None:
        return self.exit.exited_at if self.exit else None

    @property
    def log_driver(self) -> str:
        """The driver the task logs with, also for a record with no config of ours."""
        return logmodes.driver_of(self.config)

    def check_logs(self) -> None:
        """Refuse (FailedPrecondition, saying where the output went) to read the log of a
        task that keeps none: its output goes to the caller's paths, or it is
        interactive with a driver the daemon does not write. A reader (``logs``,
        ``attach``, a scheduler's tail) asks before it waits on a log that never grows."""
        cfg = self.config
        if cfg is None:
            return
        if cfg.stdout_path is not None or cfg.stderr_path is not None:
            paths = ((cfg.stdout_path, "stdout"), (cfg.stderr_path, "stderr"))
            where = " and ".join(f"{path} ({stream})" for path, stream in paths if path)
            raise FailedPrecondition(
                f"container {self.id} writes its output to {where}; ctrexec keeps no log"
            )
        daemon = (logmodes.JSON_FILE, logmodes.DAEMON)
        if cfg.interactive and (cfg.log_driver, cfg.log_transport) != daemon:
            raise FailedPrecondition(
                f"container {self.id} was started with -i/-t and another log driver than "
                f"json-file through the log daemon: its output goes to `ctrexec attach {self.id}`, "
                "not to a log"
            )

    def log_dropped_bytes(self, state_dir: StrPath | None = None) -> int:
        """Bytes of the task's output its log lost to a full disk (docker's
        ``LogDroppedBytes``): what a scheduler reports next to the log it serves.
        ``state_dir``: the Executor's, when it has its own log daemon."""
        from ctrexec.logs import reader  # here: the verbs that read a config read no log

        where = None if state_dir is None else logmodes.daemon_dir(Path(state_dir))
        return reader.dropped_bytes(self.log_driver, self.log_path, daemon_dir=where)

    @property
    def superseded(self) -> bool:
        """A newer run of the container exists: this info is about an older one."""
        return self.newer_run is not None

    @property
    def network(self) -> str | None:
        """The network ctrexec attached it to (``bridge``, a CNI network's name), for a
        task started with ports or in a group; None for a namespace given by name, path,
        ``none`` or ``host``: docker's network of ``inspect`` and ``ps``."""
        return self.labels.get(lbl.NETWORK_MODE, "").removeprefix("cni:") or None

    @property
    def volume_names(self) -> tuple[str, ...]:
        """The named and anonymous volumes it mounts, whose ``_data`` is in ``mounts``."""
        return tuple(v for v in self.labels.get(lbl.VOLUMES, "").split(",") if v)

    @property
    def image_entrypoint_args(self) -> int | None:
        """How many of ``args`` are the image's Entrypoint (when the config set none), so
        docker's Entrypoint and Cmd split without reading the image again; None for a
        record made before ctrexec kept it."""
        text = self.labels.get(lbl.IMAGE_ENTRYPOINT_ARGS, "")
        return int(text) if text.isdigit() else None

    @property
    def image_workdir(self) -> str | None:
        """The image's WorkingDir; None when it has none (then the spec's "/" is no
        choice of the image's, and docker shows ""), or for a record made before."""
        return self.labels.get(lbl.IMAGE_WORKDIR)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "image": self.image,
            "status": self.status.value,
            "pid": self.pid,
            "run": self.run,
            "newer_run": self.newer_run,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "exit": self.exit.to_json() if self.exit else None,
            "exit_code": self.exit_code,
            "oom_killed": self.oom_killed,
            "restart_count": self.restart_count,
            "restarting": self.restarting,
            "restart_error": self.restart_error,
            "netns_path": self.netns_path,
            "netns_mode": self.netns_mode,
            "addresses": None
            if self.addresses is None
            else [{"ifname": a.ifname, "address": a.cidr} for a in self.addresses],
            "ports": [_port_text(p) for p in self.ports],
            "group": self.group,
            "log_path": self.log_path,
            "labels": dict(self.labels),
            "created_at": _iso(self.created_at),
            "config": self.config.to_json() if self.config else None,
            "exit_reason": self.exit_reason,
            "unknown_reason": self.unknown_reason,
            "problems": [p.to_json() for p in self.problems],
        }


def _port_text(port: PortMapping) -> str:
    """``[IP:]HOST:CONTAINER/PROTO``, as a group file writes it."""
    ip = f"[{port.host_ip}]" if ":" in port.host_ip else port.host_ip
    return f"{ip + ':' if ip else ''}{port.host_port}:{port.container_port}/{port.protocol}"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def config_of(record: containers.Container) -> TaskConfig | None:
    """The TaskConfig the record was made from; None for a record ctrexec cannot read."""
    data = record.extension_json(lbl.CONFIG_EXTENSION)
    if data is None:
        return None
    try:
        return TaskConfig.from_json(data)
    except InvalidArgument:
        return None
