"""The plugin's agent config and a task's ``config {}`` block: schemas and values.

Names follow Nomad's docker driver where the meaning is the same (``image``,
``args``, ``cap_add``, ``allow_privileged``, ``allow_caps``...), so a job moves
between the two drivers by changing ``driver`` and little else (docs/nomad.md).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from ctrexec import DEFAULT_CAPABILITIES, InvalidField, defaults, normalize_capability
from ctrexec.nomad.hclspec import Attr, Block, BlockList, Schema

#: Docker's default capabilities, lower case without CAP_, as Nomad's docker driver lists them.
DEFAULT_ALLOW_CAPS = tuple(sorted(c.removeprefix("CAP_").lower() for c in DEFAULT_CAPABILITIES))

PLUGIN_SCHEMA: Schema = (
    Attr("address", "string", defaults.DEFAULT_ADDRESS),
    Attr("namespace", "string", "nomad"),
    Attr("image_namespaces", "list(string)", []),
    Attr("default_runtime", "string", ""),
    Attr("allow_privileged", "bool", False),
    Attr("allow_caps", "list(string)", list(DEFAULT_ALLOW_CAPS)),
    Attr("volumes_enabled", "bool", True),
    # Past the docker driver's names: what else a job could take of the host
    # (ctrexec.nomad.policy); each off unless the operator turns it on.
    Attr("allow_root_mount", "bool", False),
    Attr("allow_devices", "bool", False),
    Attr("allow_host_network", "bool", False),
    Attr("allow_host_sysctls", "bool", False),
    Attr("stats_interval", "string", "1s"),
    # Nomad's docker driver: where pulls find credentials when a task has no auth block.
    Block("auth", (Attr("config", "string", ""), Attr("helper", "string", ""))),
    # Nomad's docker driver: gc { dangling_containers { ... } }; here a block of its own.
    Block(
        "dangling_containers",
        (
            Attr("enabled", "bool", True),
            Attr("dry_run", "bool", False),
            Attr("period", "string", "5m"),
            Attr("creation_grace", "string", "5m"),
        ),
    ),
)

TASK_SCHEMA: Schema = (
    Attr("image", "string", required=True),
    Attr("command", "string", ""),
    Attr("args", "list(string)"),
    Attr("entrypoint", "list(string)"),
    Attr("work_dir", "string", ""),
    Attr("privileged", "bool", False),
    Attr("readonly_rootfs", "bool", False),
    Attr("cap_add", "list(string)"),
    Attr("cap_drop", "list(string)"),
    Attr("sysctl", "map(string)"),
    Attr("volumes", "list(string)"),
    BlockList(
        "mount",
        (
            Attr("type", "string", "bind"),
            Attr("source", "string", required=True),
            Attr("target", "string", required=True),
            Attr("readonly", "bool", False),
        ),
    ),
    BlockList(
        "device",
        (
            Attr("host_path", "string", required=True),
            Attr("container_path", "string", ""),
            Attr("cgroup_permissions", "string", "rwm"),
        ),
    ),
    Attr("shm_size", "number", 0),
    Attr("pids_limit", "number", 0),
    Attr("runtime", "string", ""),
    Attr("labels", "map(string)"),
    Attr("extra_hosts", "list(string)"),
    Block(
        "auth",
        (
            Attr("username", "string", ""),
            Attr("password", "string", ""),
            Attr("server_address", "string", ""),
        ),
    ),
    Attr("force_pull", "bool", False),
    Attr("host_network", "bool", False),
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(field: str, text: str) -> float:
    """Go's duration syntax as Nomad configs use it (``500ms``, ``1m30s``), in seconds."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise InvalidField(field, text, "expected a duration such as 1s, 500ms or 1m30s")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@attrs.frozen(kw_only=True)
class DanglingPolicy:
    """Containers of this driver that no allocation claims: removed (or, in a dry run,
    named in the log) once ``creation_grace`` has passed since the plugin's Init and
    since their creation, checked every ``period``."""

    enabled: bool = True
    dry_run: bool = False
    period: float = 300.0
    creation_grace: float = 300.0

    @classmethod
    def from_decoded(cls, block: dict[str, Any] | None) -> DanglingPolicy:
        if block is None:
            return cls()
        return cls(
            enabled=block["enabled"],
            dry_run=block["dry_run"],
            period=parse_duration("dangling_containers.period", block["period"]),
            creation_grace=parse_duration(
                "dangling_containers.creation_grace", block["creation_grace"]
            ),
        )


@attrs.frozen(kw_only=True)
class PluginConfig:
    """The agent's ``plugin "nomad-driver-ctrexec" { config { ... } }`` block."""

    address: str
    namespace: str
    image_namespaces: tuple[str, ...]
    default_runtime: str
    allow_privileged: bool
    allow_caps: tuple[str, ...]
    volumes_enabled: bool
    allow_root_mount: bool
    allow_devices: bool
    allow_host_network: bool
    allow_host_sysctls: bool
    stats_interval: float
    dangling: DanglingPolicy
    #: docker's config.json to read credentials from, and a credential helper for all
    #: registries (the docker driver's ``auth { config, helper }``); empty: defaults.
    auth_config: str = ""
    auth_helper: str = ""

    @classmethod
    def from_decoded(cls, data: dict[str, Any]) -> PluginConfig:
        values = dict(data)
        values["stats_interval"] = parse_duration("stats_interval", data["stats_interval"])
        allowed = tuple(c.lower() for c in data["allow_caps"])
        for cap in allowed:
            if cap != "all":
                try:
                    normalize_capability(cap)
                except Exception as exc:
                    raise InvalidField("allow_caps", cap, str(exc)) from exc
        values["allow_caps"] = allowed
        values["dangling"] = DanglingPolicy.from_decoded(data.get("dangling_containers"))
        values.pop("dangling_containers", None)
        auth = values.pop("auth", None) or {}
        values["auth_config"] = auth.get("config", "")
        values["auth_helper"] = auth.get("helper", "")
        return cls(**values)
