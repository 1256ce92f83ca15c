"""A group's network namespace: its name, its path, wiring it and releasing its network.

A group (``group up``'s, or the implicit one-task group that ``run -p`` makes) lives in
the pinned namespace ``cx-NAME``. The executor releases a ``run -p`` container's
namespace when the container goes, and ``ctrexec.groups`` makes and removes the
namespaces of both kinds; the name scheme and the release live here, below both, so
neither has to import the other. Only plain values cross: names, modes, paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec import owners
from ctrexec.errors import CtrexecError
from ctrexec.net import hostfiles, netns
from ctrexec.net.holders import NETNS_PREFIX

if TYPE_CHECKING:  # types only: the executor imports this, and a task without a
    # network of its own must not pay for loading the CNI side at start-up
    from ctrexec.net.networks import Attachment, Networks
    from ctrexec.net.ports import PortMapping


def netns_name(group: str) -> str:
    """The namespace's name, checked as ``ip netns`` names are."""
    return netns.validate_name(NETNS_PREFIX + group)


def netns_path(group: str) -> str:
    """Where the group's namespace is pinned (it may not exist)."""
    return netns.resolve(netns_name(group))


def wire(
    networks: Networks,
    group: str,
    mode: str,
    ports: Sequence[PortMapping],
    *,
    prefer: Sequence[str] = (),
    owner: owners.Owner | None = None,
) -> tuple[str, Attachment]:
    """Make the group's namespace and attach it; a failed attach removes the namespace
    again. Its path and what the attach gave it. ``prefer``: the addresses the group
    had, asked for again (a re-made namespace keeps its address when it is free);
    ``owner``: whose pin it is (:mod:`ctrexec.owners`)."""
    ns = netns.create(netns_name(group), owner=owner)
    try:
        return ns.path, attach(networks, group, ns.path, mode, ports, prefer=prefer)
    except BaseException:
        with contextlib.suppress(CtrexecError):
            netns.remove(ns.path)
        raise


def attach(
    networks: Networks,
    group: str,
    path: str,
    mode: str,
    ports: Sequence[PortMapping],
    *,
    prefer: Sequence[str] = (),
) -> Attachment:
    """``networks.setup``, asking for the ``prefer`` addresses (the group's own)."""
    return networks.setup(group, path, mode, ports, prefer=prefer)


def release(
    networks: Networks,
    files_dir: Path,
    group: str,
    mode: str,
    *,
    ports: Sequence[PortMapping] = (),
    addresses: Sequence[str] = (),
) -> None:
    """Release the group's network: CNI DEL first (it needs the namespace to remove the
    masquerade rules), then the namespace itself. Fine once either is gone. ``ports``
    and ``addresses`` are what the records say, for a DEL whose cached ADD is lost."""
    path = netns_path(group)
    networks.teardown(
        group, path if Path(path).exists() else None, mode, ports=ports, addresses=addresses
    )
    hostfiles.remove_legacy(path, base=files_dir)  # from before per-task files
    with contextlib.suppress(CtrexecError):
        netns.remove(path)
