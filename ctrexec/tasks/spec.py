"""From a TaskConfig and an image to an OCI spec: validation first, then pure building.

A TaskConfig checks each field's type and range when it is made; :func:`check_config`
adds what needs the host or parses mounts (runtime, volumes, tmpfs, devices, stop
signal), so bad input is refused before anything is created. :func:`build` composes
the ``with_*`` options of :mod:`ctrexec.oci`.
"""

from __future__ import annotations

import os
import signal as signals
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import defaults, ids, oci
from ctrexec import labels as lbl
from ctrexec.containerd.runtimes import RuntimeChoice
from ctrexec.containerd.runtimes import resolve as resolve_runtime
from ctrexec.errors import Internal, InvalidArgument, InvalidField
from ctrexec.net import hostfiles
from ctrexec.net.hostfiles import HostFiles
from ctrexec.oci import caps, mounts, namespaces, process, resources, seccomp, secopts
from ctrexec.oci.user import ResolvedUser
from ctrexec.tasks import fields
from ctrexec.tasks.config import TaskConfig

if TYPE_CHECKING:  # the type only: checking a config loads no image stubs
    from ctrexec.containerd.images import ImageConfig


@attrs.frozen
class CheckedConfig:
    """A TaskConfig after validation, with its parsed parts."""

    config: TaskConfig
    runtime: RuntimeChoice
    #: ``-v`` then ``--mount``; a VolumeMount until the volume store binds it
    #: (:func:`ctrexec.tasks.volumes.bind_volumes`).
    volumes: tuple[mounts.Mount | mounts.VolumeMount, ...]
    tmpfs: tuple[mounts.Mount, ...]
    devices: tuple[mounts.Device, ...]
    memory: int | None
    labels: Mapping[str, str]
    memory_reservation: int | None = None
    #: The host's init binary (``init``), bound read-only into the task.
    init_binary: str | None = None
    #: ``security_opt``'s parts; ``seccomp_profile`` is the file's, as read.
    security: secopts.SecurityOpts = attrs.field(factory=secopts.SecurityOpts)
    seccomp_profile: Mapping[str, Any] | None = None


def parse_signal(value: str | int) -> int:
    """``SIGTERM``, ``TERM`` or ``15`` to a signal number."""
    text = str(value).strip().upper()
    if text.isdigit():
        num = int(text)
        if 0 < num < signals.NSIG:
            return num
        raise InvalidArgument(f"invalid signal {value!r}")
    name = text if text.startswith("SIG") else f"SIG{text}"
    try:
        return int(signals.Signals[name])
    except KeyError as exc:
        raise InvalidArgument(f"invalid signal {value!r}") from exc


def host_bounding_capabilities() -> list[str]:
    """This process's capability bounding set: all that ``--privileged`` can grant.

    Read here, not in :mod:`ctrexec.oci`, so the spec builders stay free of I/O.
    """
    return caps.bounding_capabilities(Path("/proc/self/status").read_text())


def find_init(candidates: Sequence[str] | None = None) -> str:
    """The host's init for ``init``: the first of ``candidates`` (defaults.INIT_BINARIES)
    that is an executable file."""
    candidates = defaults.INIT_BINARIES if candidates is None else candidates
    for path in candidates:
        if Path(path).is_file() and os.access(path, os.X_OK):
            return path
    raise InvalidArgument(
        f"no init binary on this host (looked for {', '.join(candidates)}); "
        "install Debian's tini: apt-get install tini"
    )


def read_seccomp_profile(path: str) -> Mapping[str, Any]:
    """A ``seccomp=PATH`` profile file, its shape checked (:mod:`ctrexec.oci.secopts`)."""
    import json  # here, for start-up cost: only a config with a profile file reads one

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"opening seccomp profile ({path}) failed: {exc}") from exc
    except ValueError as exc:
        raise InvalidArgument(f"Decoding seccomp profile failed: {exc}") from exc
    secopts.oci_profile(data, [])
    return data if isinstance(data, dict) else {}


def check_host_cpus(cpus: float) -> None:
    """Refuse more CPUs' worth of time than the host has, in docker's words.

    The count is the host's online CPUs (``os.cpu_count``), not this process's
    affinity mask: the task does not inherit the CLI's affinity (runc starts it from
    the shim, under its own cgroup), so ``taskset -c 0 ctrexec run --cpus 2`` on a
    2-CPU host asks for something the task can have. docker checks the same number.
    """
    count = os.cpu_count() or 1
    if cpus > count:
        raise InvalidArgument(
            f"Range of CPUs is from {resources.MIN_CPUS:.2f} to {count:.2f}, "
            f"as there are only {count} CPUs available"
        )


def _binds(found: Sequence[mounts.Mount | mounts.VolumeMount]) -> list[mounts.Mount]:
    return [m for m in found if isinstance(m, mounts.Mount)]


def check_config(config: TaskConfig, *, containerd_address: str | None = None) -> CheckedConfig:
    """What a TaskConfig could not check by itself, refused before any side effect.

    The config checked each field's type and range when it was made; here come the
    checks that need the host (the runtime is installed, mount sources and devices
    exist and are allowed) and the parsing of mounts, each error named by its field.
    """
    with fields.naming("runtime", config.runtime):
        runtime = resolve_runtime(config.runtime)
    with fields.naming("volumes", config.volumes):
        volumes = tuple(mounts.parse_volume(v) for v in config.volumes)
        mounts.validate_mount_sources(_binds(volumes), containerd_address=containerd_address)
    with fields.naming("mounts", config.mounts):
        flagged = tuple(mounts.parse_mount(m) for m in config.mounts)
        mounts.validate_mount_sources(_binds(flagged), containerd_address=containerd_address)
        volumes += flagged
    with fields.naming("tmpfs", config.tmpfs):
        tmpfs = tuple(mounts.parse_tmpfs(t) for t in config.tmpfs)
    with fields.naming("devices", config.devices):
        devices = tuple(mounts.parse_device(d) for d in config.devices)
    if config.stop_signal is not None:
        with fields.naming("stop_signal", config.stop_signal):
            parse_signal(config.stop_signal)
    if config.cpus is not None:
        check_host_cpus(config.cpus)
    if config.memory is not None and config.memory_swap is not None:
        swap = resources.parse_memory_swap(config.memory_swap)
        if swap != -1 and swap < resources.parse_size(config.memory):
            raise InvalidField(
                "memory_swap",
                config.memory_swap,
                "Minimum memoryswap limit should be larger than memory limit, see usage",
            )
    init_binary = None
    if config.init:
        with fields.naming("init", config.init):
            init_binary = find_init()
    security = secopts.parse_security_opts(config.security_opt)
    profile = None
    if security.seccomp not in (None, "unconfined"):
        with fields.naming("security_opt", config.security_opt):
            profile = read_seccomp_profile(security.seccomp)
    return CheckedConfig(
        config=config,
        runtime=runtime,
        volumes=volumes,
        tmpfs=tmpfs,
        devices=devices,
        memory=resources.parse_size(config.memory) if config.memory is not None else None,
        memory_reservation=(
            None
            if config.memory_reservation is None
            else resources.parse_size(config.memory_reservation)
        ),
        labels=dict(config.labels),
        init_binary=init_binary,
        security=security,
        seccomp_profile=profile,
    )


def build(
    checked: CheckedConfig,
    *,
    image: ImageConfig,
    user: ResolvedUser,
    netns_path: str | None,
    host_network: bool,
    hostfiles: HostFiles | None,
    namespace: str,
    containerd_address: str | None = None,
) -> dict[str, Any]:
    """The OCI spec for one task; ``image``: the defaults its image carries."""
    cfg = checked.config
    return oci.build_spec(
        *_process_opts(cfg, image, user, init=checked.init_binary is not None),
        *_network_opts(cfg, netns_path, host_network=host_network),
        *_filesystem_opts(checked, hostfiles, containerd_address),
        *_resource_opts(checked, namespace),
        *_privilege_opts(checked),
        *_annotation_opts(cfg, namespace),
    )


def _process_opts(
    cfg: TaskConfig, image: ImageConfig, user: ResolvedUser, *, init: bool
) -> list[oci.SpecOpt]:
    """What runs and as whom: the config's values over the image's defaults."""
    args = process.resolve_args(image.entrypoint, image.cmd, cfg.entrypoint, cfg.command)
    opts = [
        process.with_args(args),
        *([process.with_init()] if init else []),
        # docker's default for a terminal, which the image and the user may override
        process.with_env(
            process.merge_env(["TERM=xterm"] * cfg.tty + list(image.env), dict(cfg.env))
        ),
        process.with_cwd(cfg.workdir or image.working_dir or "/"),
        process.with_user_ids(user.uid, user.gid, user.additional_gids),
        process.with_tty(cfg.tty),
    ]
    if cfg.oom_score_adj is not None:
        opts.append(process.with_oom_score_adj(cfg.oom_score_adj))
    if cfg.ulimits:
        opts.append(process.with_rlimits(process.check_ulimits(cfg.ulimits)))
    return opts


def _network_opts(
    cfg: TaskConfig, netns_path: str | None, *, host_network: bool
) -> list[oci.SpecOpt]:
    """The namespace to join, and what is set inside it (so sysctls come after it)."""
    opts: list[oci.SpecOpt] = []
    if host_network:
        opts.append(namespaces.with_host_network())
    elif netns_path is not None:
        opts.append(namespaces.with_network_namespace(netns_path))
    opts.append(namespaces.with_hostname(cfg.hostname or default_hostname(cfg)))
    if cfg.pid == "host":
        opts.append(namespaces.with_host_namespace("pid"))
    if cfg.ipc == "host":
        opts.append(namespaces.with_host_namespace("ipc"))
    if cfg.sysctls:
        opts.append(namespaces.with_sysctls(cfg.sysctls))
    return opts


def _filesystem_opts(
    checked: CheckedConfig, hostfiles: HostFiles | None, containerd_address: str | None
) -> list[oci.SpecOpt]:
    """The task's own host files, the user's volumes and tmpfs, a read-only root.

    /etc/hosts stays writable, as docker's, unless the root is read-only: docker's
    ``--read-only`` makes the three host files read-only too.
    """
    opts: list[oci.SpecOpt] = []
    read_only = checked.config.read_only
    if hostfiles is not None:
        opts += [
            mounts.with_bind_mount(str(src), dst, readonly=read_only or dst != "/etc/hosts")
            for src, dst in hostfiles.mounts()
        ]
    if checked.config.shm_size is not None:
        opts.append(mounts.with_shm_size(resources.parse_shm_size(checked.config.shm_size)))
    if checked.config.ipc == "host":  # POSIX shared memory is /dev/shm's files
        opts.append(mounts.with_bind_mount(mounts.SHM_PATH, mounts.SHM_PATH))
    if checked.init_binary is not None:
        opts.append(mounts.with_bind_mount(checked.init_binary, process.INIT_PATH, readonly=True))
    for m in (*checked.volumes, *checked.tmpfs):
        if not isinstance(m, mounts.Mount):
            raise Internal(f"volume at {m.destination} was not bound to its directory")
        opts.append(mounts.with_mount(m, containerd_address=containerd_address))
    if read_only:
        opts.append(mounts.with_readonly_rootfs())
    return opts


def _resource_opts(checked: CheckedConfig, namespace: str) -> list[oci.SpecOpt]:
    """The task's cgroup (ctrexec's own, where it finds it again, unless the caller
    names one) and its limits."""
    cfg = checked.config
    opts = [resources.with_cgroups_path(cfg.cgroup or ids.task_cgroup(namespace, cfg.name))]
    if checked.memory is not None:
        opts.append(resources.with_memory_limit(checked.memory))
    if cfg.memory_swap is not None:
        opts.append(resources.with_memory_swap(cfg.memory_swap))
    if checked.memory_reservation is not None:
        opts.append(resources.with_memory_reservation(checked.memory_reservation))
    if cfg.cpus is not None:
        opts.append(resources.with_cpus(cfg.cpus))
    if cfg.cpu_shares is not None:
        opts.append(resources.with_cpu_shares(cfg.cpu_shares))
    if cfg.cpuset_cpus is not None:
        opts.append(resources.with_cpuset(cpus=cfg.cpuset_cpus))
    if cfg.pids_limit is not None:
        opts.append(resources.with_pids_limit(cfg.pids_limit))
    return opts


def _privilege_opts(checked: CheckedConfig) -> list[oci.SpecOpt]:
    """How much of the host the task may reach: capabilities, then devices (after
    privileged, which replaces the device rules with its own "allow all")."""
    cfg = checked.config
    opts: list[oci.SpecOpt] = []
    if cfg.privileged:
        opts.append(oci.with_privileged(capabilities=host_bounding_capabilities()))
    else:
        # Drop first, then add: docker reads ``--cap-drop ALL --cap-add X`` as "only X".
        if cfg.cap_drop:
            opts.append(caps.with_dropped_capabilities(cfg.cap_drop))
        if cfg.cap_add:
            opts.append(caps.with_added_capabilities(cfg.cap_add))
    if checked.devices:
        opts.append(mounts.with_devices(checked.devices))
    if checked.security.no_new_privileges is not None:
        opts.append(process.with_no_new_privileges(checked.security.no_new_privileges))
    if cfg.privileged:  # no filter at all
        return opts
    if checked.security.seccomp == "unconfined":
        opts.append(seccomp.with_seccomp(None))
    elif checked.seccomp_profile is not None:
        opts.append(secopts.with_seccomp_profile(checked.seccomp_profile))
    return opts


def _annotation_opts(cfg: TaskConfig, namespace: str) -> list[oci.SpecOpt]:
    """The user's annotations, plus the one that puts a group's tasks in one shim."""
    annotations = dict(cfg.annotations)
    if cfg.group and cfg.share_shim:
        annotations[lbl.SHIM_GROUP_ANNOTATION] = f"ctrexec-{namespace}-{cfg.group}"
    return [oci.with_annotations(annotations)] if annotations else []


def default_hostname(cfg: TaskConfig) -> str:
    """The group's (else the task's) name, made a valid hostname label."""
    name = cfg.group or cfg.name
    return name.replace("_", "-").replace(".", "-")[:63].strip("-") or "ctrexec"


def record_labels(
    checked: CheckedConfig,
    *,
    image_config: ImageConfig,
    image_id: str = "",
    mode: str,
    netns_path: str | None,
    files: HostFiles | None,
    log_path: Path,
    owner_labels: Mapping[str, str],
) -> dict[str, str]:
    """Everything a later start, stop, supervisor or recovering process needs to
    know about the task, kept where ctrexec keeps all state: the record's labels."""
    config = checked.config
    labels = {
        **checked.labels,
        lbl.MANAGED: "true",
        lbl.NETNS_MODE: mode,
        lbl.LOG_PATH: str(log_path),
        lbl.IMAGE_REF: config.image,
        lbl.STOP_TIMEOUT: str(config.stop_timeout),
        lbl.STOP_SIGNAL: config.stop_signal or image_config.stop_signal or "SIGTERM",
        **owner_labels,
    }
    if netns_path is not None:
        labels[lbl.NETNS_PATH] = netns_path
    if files is not None:
        labels[lbl.HOSTFILES_DIR] = str(files.directory)
    if config.group:
        labels[lbl.GROUP] = config.group
    if image_id:
        labels[lbl.IMAGE_ID] = image_id
    if image_config.working_dir:
        labels[lbl.IMAGE_WORKDIR] = image_config.working_dir
    if config.entrypoint is None:  # the argv starts with the image's Entrypoint
        labels[lbl.IMAGE_ENTRYPOINT_ARGS] = str(len(image_config.entrypoint or ()))
    if config.auto_remove:
        labels[lbl.AUTO_REMOVE] = "true"
    if config.restart.policy != "no":
        labels[lbl.RESTART_POLICY] = config.restart.policy
        labels[lbl.RESTART_MAX] = str(config.restart.max_attempts)
        labels[lbl.RESTART_DELAY] = str(config.restart.delay)
    return labels


def resolv_conf(config: TaskConfig | None) -> str | None:
    """The task's own resolv.conf (``dns``, ``dns_search``, ``dns_options``), or None for
    the host's."""
    if config is None or not config.dns:
        return None
    return hostfiles.render_dns(config.dns, config.dns_search, config.dns_options)
