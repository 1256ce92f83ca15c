"""From a TaskConfig and an image to an OCI spec: validation first, then pure building.

:func:`check_config` does every check that needs no daemon (ids, labels, mounts,
limits, sysctls, runtime, stop signal), so bad input is refused before anything is
created. :func:`build` composes the ``with_*`` options of :mod:`ctrexec.oci`.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ctrexec import labels as lbl
from ctrexec import oci
from ctrexec.errors import InvalidArgument
from ctrexec.hostfiles import HostFiles
from ctrexec.ids import validate_id
from ctrexec.oci import caps, mounts, namespaces, process, resources
from ctrexec.oci.user import ResolvedUser
from ctrexec.runtimes import RuntimeChoice
from ctrexec.runtimes import resolve as resolve_runtime
from ctrexec.taskconfig import TaskConfig


@attrs.frozen
class CheckedConfig:
    """A TaskConfig after validation, with its parsed parts."""

    config: TaskConfig
    runtime: RuntimeChoice
    volumes: tuple[mounts.Mount, ...]
    tmpfs: tuple[mounts.Mount, ...]
    devices: tuple[mounts.Device, ...]
    memory: int | None
    labels: Mapping[str, str]


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


def check_config(config: TaskConfig, *, containerd_address: str | None = None) -> CheckedConfig:
    """Everything that can be refused without a daemon, refused here."""
    validate_id(config.name, kind="container name")
    if not config.image:
        raise InvalidArgument("an image is required")
    if config.group is not None:
        validate_id(config.group, kind="group name")
    user_labels = lbl.validate_user_labels(config.labels)
    runtime = resolve_runtime(config.runtime)
    volumes = tuple(mounts.parse_volume(v) for v in config.volumes)
    mounts.validate_mount_sources(volumes, containerd_address=containerd_address)
    tmpfs = tuple(mounts.parse_tmpfs(t) for t in config.tmpfs)
    devices = tuple(mounts.parse_device(d) for d in config.devices)
    memory = resources.parse_size(config.memory) if config.memory is not None else None
    if memory is not None and memory < resources.MIN_MEMORY_BYTES:
        raise InvalidArgument(
            f"memory limit {memory} bytes is too small to start a task; minimum is 6MB"
        )
    if config.cpus is not None and not 0 < config.cpus <= 1024:
        raise InvalidArgument(f"invalid --cpus {config.cpus}")
    if config.pids_limit is not None and config.pids_limit == 0:
        raise InvalidArgument("pids limit must be positive, or -1 for unlimited")
    for key in config.sysctls:
        namespaces.check_sysctl_key(key)
    if config.stop_signal is not None:
        parse_signal(config.stop_signal)
    if config.stop_timeout < 0:
        raise InvalidArgument("stop timeout must not be negative")
    if config.hostname is not None:
        namespaces.with_hostname(config.hostname)(oci.default_spec())
    if config.oom_score_adj is not None and not -1000 <= config.oom_score_adj <= 1000:
        raise InvalidArgument("oom_score_adj must be between -1000 and 1000")
    for cap in (*config.cap_add, *config.cap_drop):
        if cap.upper() != "ALL":
            caps.normalize_capability(cap)
    return CheckedConfig(
        config=config,
        runtime=runtime,
        volumes=volumes,
        tmpfs=tmpfs,
        devices=devices,
        memory=memory,
        labels=user_labels,
    )


def build(
    checked: CheckedConfig,
    *,
    image_entrypoint: Sequence[str] | None,
    image_cmd: Sequence[str] | None,
    image_env: Sequence[str],
    image_workdir: str,
    user: ResolvedUser,
    netns_path: str | None,
    host_network: bool,
    hostfiles: HostFiles | None,
    namespace: str,
    containerd_address: str | None = None,
) -> dict[str, Any]:
    """The OCI spec for one task."""
    cfg = checked.config
    args = process.resolve_args(image_entrypoint, image_cmd, cfg.entrypoint, cfg.command)
    opts: list[oci.SpecOpt] = [
        process.with_args(args),
        process.with_env(process.merge_env(list(image_env), dict(cfg.env))),
        process.with_cwd(cfg.workdir or image_workdir or "/"),
        process.with_user_ids(user.uid, user.gid, user.additional_gids),
        process.with_tty(cfg.tty),
        resources.with_cgroups_path(f"/ctrexec/{namespace}/{cfg.name}"),
    ]
    if host_network:
        opts.append(namespaces.with_host_network())
    elif netns_path is not None:
        opts.append(namespaces.with_network_namespace(netns_path))
    opts.append(namespaces.with_hostname(cfg.hostname or default_hostname(cfg)))
    if hostfiles is not None:
        opts += [
            mounts.with_bind_mount(str(src), dst, readonly=dst != "/etc/hosts")
            for src, dst in hostfiles.mounts()
        ]
    for m in (*checked.volumes, *checked.tmpfs):
        opts.append(mounts.with_mount(m, containerd_address=containerd_address))
    if cfg.read_only:
        opts.append(mounts.with_readonly_rootfs())
    if checked.memory is not None:
        opts.append(resources.with_memory_limit(checked.memory))
    if cfg.cpus is not None:
        opts.append(resources.with_cpus(cfg.cpus))
    if cfg.cpu_shares is not None:
        opts.append(resources.with_cpu_shares(cfg.cpu_shares))
    if cfg.cpuset_cpus is not None:
        opts.append(resources.with_cpuset(cpus=cfg.cpuset_cpus))
    if cfg.pids_limit is not None:
        opts.append(resources.with_pids_limit(cfg.pids_limit))
    if cfg.privileged:
        opts.append(oci.with_privileged())
    else:
        # Drop first, then add: docker reads ``--cap-drop ALL --cap-add X`` as "only X".
        if cfg.cap_drop:
            opts.append(caps.with_dropped_capabilities(cfg.cap_drop))
        if cfg.cap_add:
            opts.append(caps.with_added_capabilities(cfg.cap_add))
    if checked.devices:
        opts.append(mounts.with_devices(checked.devices))
    if cfg.sysctls:
        opts.append(namespaces.with_sysctls(cfg.sysctls))
    if cfg.oom_score_adj is not None:
        opts.append(process.with_oom_score_adj(cfg.oom_score_adj))
    annotations = dict(cfg.annotations)
    if cfg.group and cfg.share_shim:
        annotations[lbl.SHIM_GROUP_ANNOTATION] = f"ctrexec-{namespace}-{cfg.group}"
    if annotations:
        opts.append(oci.with_annotations(annotations))
    return oci.build_spec(*opts)


def default_hostname(cfg: TaskConfig) -> str:
    """The group's (else the task's) name, made a valid hostname label."""
    name = cfg.group or cfg.name
    return name.replace("_", "-").replace(".", "-")[:63].strip("-") or "ctrexec"
