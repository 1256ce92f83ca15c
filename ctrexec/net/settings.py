"""Where a process's :class:`Networks` come from: the environment, or a container's label.

The CLI has no configuration file; its bridge, subnet and CNI directories can be moved
with ``CTREXEC_*`` variables (tests give theirs their own names and subnet). A container
that ``run --network`` wired records the settings it was wired with, so whichever
process removes it (``rm``, ``supervise``, a library user) tears down the very
attachment that was made, in the cache it was made in, whatever its own environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from ctrexec.defaults import SUBNET_ENV
from ctrexec.errors import InvalidArgument
from ctrexec.net import cni as _cni
from ctrexec.net.networks import DEFAULT_BRIDGE, DEFAULT_NETWORK, DEFAULT_SUBNET, Networks

#: Environment variable -> what it sets (documented in README, "Networks").
ENVIRONMENT = {
    "CTREXEC_NETWORK": "the name of ctrexec's bridge network (CNI cache key)",
    "CTREXEC_BRIDGE": "the bridge interface",
    SUBNET_ENV: "the bridge network's subnet",
    "CTREXEC_CNI_CONF_DIR": "where cni:NAME conflists are read",
    "CTREXEC_CNI_CACHE_DIR": "where CNI results are kept",
    "CTREXEC_CNI_PATH": "plugin directories, colon-separated",
    "CTREXEC_IPAM_DIR": "host-local's allocation directory",
}


def from_env(env: Mapping[str, str] | None = None, *, subnet: str | None = None) -> Networks:
    """The Networks the environment asks for (``subnet``: a flag that overrides it):
    public as ``networks_from_env``, so a scheduler's tasks share the CLI's networks
    (one bridge, subnet and IPAM store) when both run on a host."""
    env = os.environ if env is None else env
    plugin_path = env.get("CTREXEC_CNI_PATH")
    return Networks(
        network=env.get("CTREXEC_NETWORK") or DEFAULT_NETWORK,
        bridge=env.get("CTREXEC_BRIDGE") or DEFAULT_BRIDGE,
        subnet=subnet or env.get(SUBNET_ENV) or DEFAULT_SUBNET,
        conf_dir=env.get("CTREXEC_CNI_CONF_DIR") or _cni.DEFAULT_CONF_DIR,
        cache_dir=env.get("CTREXEC_CNI_CACHE_DIR") or _cni.DEFAULT_CACHE_DIR,
        plugin_dirs=plugin_path.split(":") if plugin_path else _cni.DEFAULT_PLUGIN_DIRS,
        ipam_dir=env.get("CTREXEC_IPAM_DIR") or _cni.DEFAULT_IPAM_DIR,
    )


def to_label(nets: Networks) -> str:
    """The settings as compact JSON, small enough for a container label."""
    return json.dumps(
        {
            "network": nets.network,
            "bridge": nets.bridge,
            "subnet": str(nets.subnet),
            "conf_dir": os.fspath(nets.cni.conf_dir),
            "cache_dir": os.fspath(nets.cni.cache_dir),
            "plugin_dirs": list(nets.cni.plugin_dirs),
            "ipam_dir": nets.ipam_dir,
        },
        separators=(",", ":"),
    )


def from_label(text: str) -> Networks:
    """Networks from :func:`to_label`'s JSON (InvalidArgument if it is not that)."""
    try:
        data = json.loads(text)
        return Networks(
            network=str(data["network"]),
            bridge=str(data["bridge"]),
            subnet=str(data["subnet"]),
            conf_dir=str(data["conf_dir"]),
            cache_dir=str(data["cache_dir"]),
            plugin_dirs=[str(d) for d in data["plugin_dirs"]],
            ipam_dir=str(data["ipam_dir"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(f"unreadable network settings label: {text[:80]!r}") from exc
