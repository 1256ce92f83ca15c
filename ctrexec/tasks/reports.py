"""What the executor hands back: a handle a scheduler keeps, the info it reads.

A :class:`TaskHandle` names one run of a task and is persisted by schedulers, so it
round-trips through JSON; a :class:`TaskInfo` is the record and the state of one run,
with the facts a front end shows (``ps``, ``inspect``) read from its labels here,
not by each front end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import FailedPrecondition, InvalidArgument
from ctrexec.logs import modes as logmodes
from ctrexec.oci.mounts import Mount
from ctrexec.tasks.config import Listed, TaskConfig
from ctrexec.tasks.fields import Problem

if TYPE_CHECKING:  # the network modules cost a CLI command that only reads infos
    from ctrexec.net.cni import PortMapping
    from ctrexec.net.nsinfo import Address
    from ctrexec.paths import StrPath


T = TypeVar("T")


class Deferred(Generic[T]):
    """A value worked out at its first read, then kept: what a :class:`TaskInfo` knows
    only by decoding its record (the config made and checked, the spec decoded) costs a
    listing nothing until something reads it. ``ps`` of 300 containers made every
    config and decoded every spec, about a millisecond each, to print an id or three
    of their fields (issue 40). Two threads reading at once may each work it out:
    it is the same value."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make: Callable[[], T] | None = make
        self._value: T | None = None

    def get(self) -> T:
        make = self._make
        if make is not None:
            self._value = make()
            self._make = None
        return self._value  # type: ignore[return-value]  # made: T, None included


def _got(value: T | Deferred[T]) -> T:
    return value.get() if isinstance(value, Deferred) else value


def _shown(value: object) -> str:
    return repr(_got(value))


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
    # Each field of a value or a Deferred one is given as its name without the "_",
    # read through the property of that name, and compared and shown by its value.
    _config: TaskConfig | Deferred[TaskConfig | None] | None = attrs.field(eq=_got, repr=_shown)
    run: int = 0
    started_at: datetime | None = None
    restart_count: int = 0
    restarting: bool = False
    restart_error: str | None = None
    ports: tuple[PortMapping, ...] = ()
    addresses: tuple[Address, ...] | None = None
    newer_run: int | None = None
    _args: tuple[str, ...] | Deferred[tuple[str, ...]] = attrs.field(
        default=(), eq=_got, repr=_shown
    )
    _env: tuple[str, ...] | Deferred[tuple[str, ...]] = attrs.field(
        default=(), eq=_got, repr=_shown
    )
    _workdir: str | Deferred[str] = attrs.field(default="", eq=_got, repr=_shown)
    _hostname: str | Deferred[str] = attrs.field(default="", eq=_got, repr=_shown)
    problems: tuple[Problem, ...] = ()
    exit_reason: str | None = None
    unknown_reason: str | None = None
    #: The image's ID (``sha256:...``) the container was made from; "" for a record
    #: made before ctrexec kept it.
    image_id: str = ""
    _mounts: tuple[Mount, ...] | Deferred[tuple[Mount, ...]] = attrs.field(
        default=(), eq=_got, repr=_shown
    )
    #: The config's listed fields, read without making the config (a listing's rows);
    #: None: read from ``config``.
    _listed: Deferred[Listed | None] | None = attrs.field(
        default=None, alias="_listed", eq=False, repr=False
    )

    @property
    def config(self) -> TaskConfig | None:
        """The TaskConfig the container was made from; None for a record ctrexec cannot
        read (made by another ctrexec, or not by ctrexec)."""
        return _got(self._config)

    @property
    def args(self) -> tuple[str, ...]:
        return _got(self._args)

    @property
    def env(self) -> tuple[str, ...]:
        return _got(self._env)

    @property
    def workdir(self) -> str:
        return _got(self._workdir)

    @property
    def hostname(self) -> str:
        return _got(self._hostname)

    @property
    def mounts(self) -> tuple[Mount, ...]:
        """The spec's mounts at the paths the config's ``-v`` and ``--mount`` name, in the
        spec's order: docker's ``inspect`` ``.Mounts``, with their host sources."""
        return _got(self._mounts)

    def _listed_config(self) -> Listed | None:
        if self._listed is not None:
            return self._listed.get()
        cfg = self.config
        return None if cfg is None else Listed(cfg.entrypoint, cfg.command, cfg.labels, cfg.volumes)

    @property
    def command_line(self) -> tuple[str, ...]:
        """The config's entrypoint then its command, as given (the image's defaults not
        in it): docker's ``ps`` COMMAND. Read without making the config, as are
        :attr:`config_labels` and :attr:`config_volumes`: what a listing prints of it."""
        listed = self._listed_config()
        return (*(listed.entrypoint or ()), *(listed.command or ())) if listed else ()

    @property
    def config_labels(self) -> Mapping[str, str]:
        """The labels the config set (ctrexec's own are in ``labels`` only)."""
        listed = self._listed_config()
        return listed.labels if listed else {}

    @property
    def config_volumes(self) -> tuple[str, ...]:
        """The config's ``-v`` texts (``SRC:DST[:OPTS]``): docker's ``ps`` MOUNTS."""
        listed = self._listed_config()
        return listed.volumes if listed else ()

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

    def check_logs(self, *, timestamps: bool = False) -> None:
        """Refuse (FailedPrecondition, saying where the output went) to read the log of a
        task that keeps none: its output goes to the caller's paths, or it is
        interactive with a driver the daemon does not write. A reader (``logs``,
        ``attach``, a scheduler's tail) asks before it waits on a log that never grows.
        ``timestamps``: the reader shows each line's time, which the ``file`` driver
        (the shim's raw file) does not keep (InvalidArgument)."""
        features = logmodes.FEATURES.get(self.log_driver, frozenset())
        if timestamps and "read" in features and "timestamps" not in features:
            raise InvalidArgument(f"the {self.log_driver} log driver keeps no timestamps")
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
