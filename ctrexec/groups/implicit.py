"""A container with a network of its own, as docker gives one: an implicit one-task group.

``run -p 8080:80 IMAGE`` or ``run --network bridge`` needs no group file. ctrexec's unit
of "a namespace with an address and published ports" is a group, so ``run`` makes a
group of one: the namespace ``cx-NAME`` wired by the same :class:`Networks` as
``group up``, and a single task whose id is the container's name (not ``NAME-task``).
Its record carries :data:`labels.IMPLICIT_GROUP` with the network settings it was wired
with, so removing the container, by whichever process (``rm``, ``run --rm``, the
supervisor, a library user), also runs CNI DEL and removes the namespace.
``group down NAME`` removes it as well: it is a group like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.errors import AlreadyExists, CtrexecError, InvalidArgument, NotFound
from ctrexec.groups.updown import NETNS_PREFIX, teardown_network
from ctrexec.ids import validate_id
from ctrexec.net import netns, settings
from ctrexec.net.networks import Attachment, NetworkMode, Networks, parse_mode, parse_port
from ctrexec.net.ports import expand_publish
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor


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
    ex: Executor, networks: Networks, config: TaskConfig, wiring: Wiring
) -> tuple[TaskConfig, dict[str, str]]:
    """Make and wire the container's namespace; the config joined to it and the owner
    labels its record needs. Nothing is made when the name or namespace is taken, and a
    failed wiring removes the namespace again."""
    name = config.name
    if config.group is not None:
        raise InvalidArgument("--group cannot be used with --network or --publish")
    validate_id(name, kind="container name")
    ns_name = netns.validate_name(NETNS_PREFIX + name)
    with contextlib.suppress(NotFound):
        containers.get(ex.client, name)
        raise AlreadyExists(f"container name {name!r} is already in use")
    if Path(netns.resolve(ns_name)).exists():
        raise AlreadyExists(f"network namespace {ns_name} already exists (a group named {name}?)")
    path, attachment = _wire(networks, name, str(wiring.mode), wiring.ports)
    owned = {
        lbl.IMPLICIT_GROUP: settings.to_label(networks),
        lbl.NETWORK_MODE: str(wiring.mode),
        lbl.ADDRESSES: ",".join(attachment.addresses()),
    }
    if wiring.ports:
        owned[lbl.GROUP_PORTS] = ",".join(wiring.ports)
    return attrs.evolve(config, netns=path, group=name), owned


def rewire(ex: Executor, record: containers.Container) -> containers.Container:
    """The record, its namespace made and wired again if it is gone (a reboot empties
    /run): the same name and ports, from its labels, as docker's ``start`` after a
    reboot. The address may differ; its label and the task's hosts file follow it."""
    labels = record.labels
    path, name = labels.get(lbl.NETNS_PATH), labels.get(lbl.GROUP)
    if not path or not name or Path(path).exists():
        return record
    networks = settings.from_label(labels[lbl.IMPLICIT_GROUP])
    ports = [p for p in labels.get(lbl.GROUP_PORTS, "").split(",") if p]
    _, attachment = _wire(networks, name, labels.get(lbl.NETWORK_MODE, "bridge"), ports)
    addresses = ",".join(attachment.addresses())
    if addresses == labels.get(lbl.ADDRESSES):
        return record
    record = containers.update_labels(ex.client, record.id, {lbl.ADDRESSES: addresses})
    taskfiles.write(record.id, record.labels, taskinfo.config_of(record), replace=True)
    return record


def _wire(networks: Networks, name: str, mode: str, ports: Sequence[str]) -> tuple[str, Attachment]:
    """Make ``cx-NAME`` and attach it; a failed attach removes the namespace again."""
    mappings = [parse_port(p) for p in ports]
    ns = netns.create(NETNS_PREFIX + name)
    try:
        return ns.path, networks.setup(name, ns.path, mode, mappings)
    except BaseException:
        with contextlib.suppress(CtrexecError):
            netns.remove(ns.path)
        raise


def release(ex: Executor, labels: Mapping[str, str]) -> None:
    """Undo :func:`attach` for a record with these labels (a no-op for any other)."""
    text = labels.get(lbl.IMPLICIT_GROUP)
    name = labels.get(lbl.GROUP)
    if not text or not name:
        return
    path = netns.resolve(NETNS_PREFIX + name)
    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    teardown_network(settings.from_label(text), ex.files_dir, name, path, mode)


def release_unless_created(ex: Executor, labels: Mapping[str, str]) -> None:
    """:func:`release` after a failed ``run``, unless the container exists: then it is
    its removal that releases (a created container keeps its network, as docker's)."""
    try:
        containers.get(ex.client, labels[lbl.GROUP])
    except NotFound:
        release(ex, labels)
