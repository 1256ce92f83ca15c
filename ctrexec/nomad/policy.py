"""What a job author may ask of the host, decided by the operator's plugin config.

A job's ``config {}`` block is written by whoever may submit jobs, and the plugin runs
as root: each option that reaches past the task's own container (its privileges, the
host's files, devices, network or kernel settings) is refused unless the agent's
plugin config allows it. The check runs first in StartTask, before any pull, snapshot
or container, so a refused task leaves nothing behind (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctrexec import InvalidField, normalize_capability
from ctrexec.nomad.config import PluginConfig

#: The one prefix of sysctls the kernel keeps per network namespace.
NET_SYSCTL_PREFIX = "net."


def _bind_sources(opts: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, host path) of every bind the job's config asks for."""
    out = [("volumes", v.split(":", 1)[0]) for v in opts["volumes"]]
    out += [
        (f"mount[{i}].source", m["source"])
        for i, m in enumerate(opts["mount"])
        if m["type"] == "bind"
    ]
    return out


def _check_mounts(opts: dict[str, Any], plugin: PluginConfig) -> None:
    if not plugin.volumes_enabled and (opts["volumes"] or opts["mount"]):
        raise InvalidField(
            "volumes", list(opts["volumes"]), "the plugin config sets volumes_enabled = false"
        )
    if plugin.allow_root_mount:
        return
    for field, source in _bind_sources(opts):
        # realpath: /proc/1/root, /.. and a symlink to / are the host's root too
        if Path(source).is_absolute() and Path(source).resolve() == Path("/"):
            raise InvalidField(
                field, source, "the host's root; the plugin config does not set allow_root_mount"
            )


def _check_sysctls(opts: dict[str, Any], plugin: PluginConfig, own_netns: bool) -> None:
    """A ``net.*`` sysctl of a task in the host's network namespace sets the host's.
    Other sysctls are refused for every task (:class:`~ctrexec.tasks.config.TaskConfig`
    allows only the network namespace's)."""
    if own_netns or plugin.allow_host_sysctls:
        return
    for key in opts["sysctl"]:
        if key.startswith(NET_SYSCTL_PREFIX):
            raise InvalidField(
                f"sysctl.{key}", opts["sysctl"][key],
                "the task shares the host's network namespace; the plugin config does"
                " not set allow_host_sysctls = true",
            )  # fmt: skip


def check_allowed(opts: dict[str, Any], plugin: PluginConfig, *, own_netns: bool) -> None:
    """Refuse, with the one field named, what the plugin config does not allow.

    ``own_netns``: the task joins its group's namespace (else it runs in the host's,
    where a ``net.*`` sysctl would change the host).
    """
    if opts["privileged"] and not plugin.allow_privileged:
        raise InvalidField(
            "privileged", True, "the plugin config does not set allow_privileged = true"
        )
    if "all" not in plugin.allow_caps:
        allowed = {normalize_capability(c) for c in plugin.allow_caps}
        for cap in opts["cap_add"]:
            if normalize_capability(cap) not in allowed:
                raise InvalidField("cap_add", cap, "not in the plugin config's allow_caps")
    _check_mounts(opts, plugin)
    if opts["device"] and not plugin.allow_devices:
        raise InvalidField(
            "device", opts["device"][0]["host_path"],
            "the plugin config does not set allow_devices = true",
        )  # fmt: skip
    if opts["host_network"] and not plugin.allow_host_network:
        raise InvalidField(
            "host_network", True, "the plugin config does not set allow_host_network = true"
        )
    _check_sysctls(opts, plugin, own_netns)
