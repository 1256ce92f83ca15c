"""A container with a network of its own, as docker gives one: an implicit one-task group.

``run -p 8080:80 IMAGE`` or ``run --network bridge`` needs no group file. ctrexec's unit
of "a namespace with an address and published ports" is a group, so ``run`` makes a
group of one: the namespace ``cx-NAME`` wired by the same :class:`Networks` as
``group up``, and a single task whose id is the container's name (not ``NAME-task``).
Its record carries :data:`labels.IMPLICIT_GROUP` with the network settings it was wired
with, so removing the container, by whichever process (``rm``, ``run --rm``, the
supervisor, a library user), also runs CNI DEL and removes the namespace.
``group down NAME`` removes it as well: it is a group like any other. What the
executor does with such a record (wire it again after a reboot, release it on removal)
reads only its labels, so it is :mod:`ctrexec.tasks.implicitnet`'s, below this package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from ctrexec import inflight, owners
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.errors import AlreadyExists, InvalidArgument, NotFound
from ctrexec.ids import validate_id
from ctrexec.net import groupns, settings
from ctrexec.net.networks import NetworkMode, Networks, parse_mode, parse_port
from ctrexec.net.ports import expand_publish
from ctrexec.tasks import implicitnet
from ctrexec.tasks.config import TaskConfig


@attrs.frozen
class Wiring:
    """What ``run`` asked of the network, checked: the mode and the ports to publish."""

    mode: NetworkMode
    ports: tuple[str, ...] = ()


def requested(network: str | None, ports: Sequence[str], netns_flag: str) -> Wiring | None:
    """Read ``--network``/``-p`` against ``--netns``; None when no namespace is to be made.

    Checks everything that needs no daemon, so a bad flag has no side effect.
    ``-p`` alone means docker's default network, the bridge; its range and
    host-port-less forms become plain mappings here. ``none`` and ``host`` need no
    group: they are ``--netns none|host``.
    """
    if network is None and not ports:
        return None
    if netns_flag not in ("none", ""):
        raise InvalidArgument("--netns cannot be used with --network or --publish")
    mode = parse_mode(network or "bridge")
    ports = [one for text in ports for one in expand_publish(text)]
    for port in ports:
        parse_port(port)
    if not mode.uses_cni:
        if ports:
            raise InvalidArgument(f"--publish needs --network bridge or cni:NAME, not {mode}")
        return None
    return Wiring(mode=mode, ports=tuple(ports))


def attach(
    client: Client, networks: Networks, config: TaskConfig, wiring: Wiring
) -> tuple[TaskConfig, dict[str, str]]:
    """Make and wire the container's namespace; the config joined to it and the owner
    labels its record needs. Nothing is made when the name or namespace is taken, and a
    failed wiring removes the namespace again."""
    name = config.name
    if config.group is not None:
        raise InvalidArgument("--group cannot be used with --network or --publish")
    validate_id(name, kind="container name")
    ns_name = groupns.netns_name(name)
    with contextlib.suppress(NotFound):
        containers.get(client, name)
        raise AlreadyExists(f"container name {name!r} is already in use")
    if Path(groupns.netns_path(name)).exists():
        raise AlreadyExists(f"network namespace {ns_name} already exists (a group named {name}?)")
    mappings = [parse_port(p) for p in wiring.ports]
    owner = owners.Owner(client.address, client.namespace, name)
    path, attachment = groupns.wire(networks, name, str(wiring.mode), mappings, owner=owner)
    owned = {
        lbl.IMPLICIT_GROUP: settings.to_label(networks),
        lbl.NETWORK_MODE: str(wiring.mode),
        lbl.ADDRESSES: ",".join(attachment.addresses()),
    }
    if wiring.ports:
        owned[lbl.GROUP_PORTS] = ",".join(wiring.ports)
    return attrs.evolve(config, netns=path, group=name), owned


def in_flight(name: str) -> contextlib.AbstractContextManager[None]:
    """Hold it from before :func:`attach` until the container's record exists (or the
    network went again): gc then leaves the namespace alone (:mod:`ctrexec.inflight`)."""
    return inflight.creating(inflight.netns_key(groupns.netns_name(name)))


def release_unless_created(client: Client, files_dir: Path, labels: Mapping[str, str]) -> None:
    """Release the network :func:`attach` made after a failed ``run``, unless the
    container exists: then it is its removal that releases (a created container keeps
    its network, as docker's), through :func:`ctrexec.tasks.implicitnet.release`."""
    try:
        containers.get(client, labels[lbl.GROUP])
    except NotFound:
        implicitnet.release(files_dir, labels)
