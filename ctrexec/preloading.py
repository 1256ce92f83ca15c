"""What a process that forks its workers loads once, before the forks.

A forked worker finds loaded what its parent loaded, and its pages stay shared with the
parent; what it loads itself is loaded again in every fork. The command line's server
forks a child per command, and a pre-forking scheduler would do the same. So the
modules that the library's verbs load, and the data files every start reads, are named
here, by the library that owns them, not by each front end.

Import only: a module that started a thread or opened a channel on import would break
every child. None of these does.
"""

from __future__ import annotations

import importlib

from ctrexec import _rpc
from ctrexec.net import netns
from ctrexec.oci import seccomp

#: The library's modules the verbs of a front end load: starting, reading and following
#: tasks, their logs and events, images, namespaces and networks, groups, the embedded
#: daemon, and what ``rm`` and ``doctor`` read of leftovers.
LIBRARY_MODULES = (
    "ctrexec.tasks.executor", "ctrexec.tasks.config", "ctrexec.tasks.events",
    "ctrexec.containerd.streams", "ctrexec.logs.reader", "ctrexec.images.registry.pull",
    "ctrexec.images.lookup", "ctrexec.images.usage", "ctrexec.net.netns",
    "ctrexec.net.networks", "ctrexec.groups.updown", "ctrexec.groups.spec",
    "ctrexec.containerd.daemon", "ctrexec.containerd.bundles", "ctrexec.tasks.stale",
    "ctrexec.logs.orphaned_shims", "ctrexec.net.nsinfo",
)  # fmt: skip


def preload() -> None:
    """Load, once in this process, the library's modules (and what gRPC loads at its
    first channel), netlink (a running task's ``inspect`` reads its addresses) and the
    data files every start reads (the default seccomp profile), so that each fork finds
    them loaded and read."""
    for name in (*LIBRARY_MODULES, *_rpc.FIRST_CHANNEL_MODULES):
        importlib.import_module(name)
    netns.load_netlink()
    seccomp.load_default_profile()
