"""A container with a network of its own, as docker gives one: an implicit one-task group.

``run -p 8080:80 IMAGE`` or ``run --network bridge`` needs no group file. ctrexec's unit
of "a namespace with an address and published ports" is a group, so ``run`` makes a
group of one: the namespace ``cx-NAME`` wired by the same :class:`Networks` as
``group up``, and a single task whose id is the container's name (not ``NAME-task``).
Its record carries :data:`labels.IMPLICIT_GROUP` with the network settings it was wired
with, so removing the container, by whichever process (``rm``, ``run --rm``, the
supervisor, a library user), also runs CNI DEL and removes the namespace.
``group down NAME`` removes it as well: it is a group like any other.

:class:`NetworkRequest` is how anyone asks for it (the CLI's ``run``/``create`` too):
``Executor.create``/``start_task(config, network=...)`` hold :func:`joined` around the
create (and start), which makes the namespace first and releases it if they fail. It
sits in ``tasks/``, below the executor, so the executor never reaches up; what happens
to such a record later reads only its labels (:mod:`ctrexec.tasks.implicitnet`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import attrs

from ctrexec import inflight, owners
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.errors import AlreadyExists, CtrexecError, InvalidArgument, NotFound
from ctrexec.ids import validate_id
from ctrexec.images import lookup
from ctrexec.net import groupns, settings
from ctrexec.net.networks import NetworkMode, Networks, parse_mode, parse_port
from ctrexec.net.ports import expand_publish
from ctrexec.tasks import implicitnet
from ctrexec.tasks.config import TaskConfig


def _port_texts(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # a str is an iterable of one-letter "ports"
        raise InvalidArgument(f"ports must be a sequence of port mappings, not {value!r}")
    return tuple(value)


@attrs.frozen(kw_only=True)
class NetworkRequest:
    """A namespace of the task's own on a CNI network, with published ports: what
    ``run --network bridge -p 8080:80`` (and ``-P``) asks for, for
    ``Executor.start_task``/``create(config, network=...)``.

    ``mode``: ``bridge`` (ctrexec's bridge) or ``cni:NAME`` (a user's conflist);
    ``none`` and ``host`` make no namespace: they are ``TaskConfig.netns``.
    ``ports``: docker's ``-p`` forms (``8080:80``, ``127.0.0.1::80/udp``,
    ``8000-8001:80-81``); a missing host port is picked at the create and kept for the
    restarts. ``publish_all``: docker's ``-P``, every port the image exposes that
    ``ports`` leaves out, on a picked host port. ``networks``: the bridge and CNI
    settings; None reads them from the environment (``CTREXEC_*``), as the CLI does.
    Checked here, with the CLI's words (InvalidArgument); the config by :meth:`check`.
    """

    mode: str = "bridge"
    ports: tuple[str, ...] = attrs.field(default=(), converter=_port_texts)
    publish_all: bool = False
    networks: Networks | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        mode = parse_mode(self.mode)
        for port in _expanded(self.ports, _no_pick()):
            parse_port(port)
        if not mode.uses_cni:
            if self.ports or self.publish_all:
                raise InvalidArgument(f"--publish needs --network bridge or cni:NAME, not {mode}")
            raise InvalidArgument(f"network mode {mode} makes no namespace: set TaskConfig.netns")

    def check(self, config: TaskConfig) -> None:
        """Refuse a config that is placed already (its own ``netns`` or ``group``),
        before anything is made or asked of a daemon."""
        if config.netns not in ("none", ""):
            raise InvalidArgument("--netns cannot be used with --network or --publish")
        if config.group is not None:
            raise InvalidArgument("--group cannot be used with --network or --publish")


def _no_pick() -> Callable[[str, str], int]:
    """Distinct stand-in host ports, for checking the forms: the real pick (a free
    port) is the create's, so a request binds nothing when made."""
    numbers = itertools.count(1)
    return lambda _ip, _proto: next(numbers)


def _expanded(ports: Iterable[str], pick: Callable[[str, str], int] | None = None) -> list[str]:
    """docker's ``-p`` forms as plain ``[IP:]HOST:CONTAINER`` mappings, one per port."""
    return [one for text in ports for one in expand_publish(text, pick)]


@attrs.frozen
class Wiring:
    """What is made: the mode and the ports to publish, host ports picked."""

    mode: NetworkMode
    ports: tuple[str, ...] = ()


def wiring(client: Client, config: TaskConfig, request: NetworkRequest) -> Wiring:
    """``request`` with its host ports picked now and, with ``publish_all``, the ports
    the image exposes that its own leave out (the image must be there)."""
    given = _expanded(request.ports)
    if request.publish_all:
        taken = {(m.container_port, m.protocol) for m in map(parse_port, given)}
        image = lookup.get_image(client, config.image, platform=config.platform)
        for text in image.config.exposed_ports:
            port, _, proto = text.partition("/")
            if port.isdigit() and (int(port), proto or "tcp") not in taken:
                given += _expanded([f"{port}/{proto or 'tcp'}"])
    return Wiring(parse_mode(request.mode), tuple(given))


@contextlib.contextmanager
def joined(
    client: Client,
    files_dir: Path,
    config: TaskConfig,
    request: NetworkRequest,
    owner_labels: Mapping[str, str],
) -> Iterator[tuple[TaskConfig, dict[str, str]]]:
    """The config joined to the namespace ``request`` asks for, and ``owner_labels``
    with the ones its record needs, for a block that creates it.

    If the block fails, the namespace and its address go again; once the record exists,
    removing the container does that (:func:`ctrexec.tasks.implicitnet.release`).
    gc keeps its hands off the namespace until then (:func:`in_flight`).
    """
    request.check(config)
    wired = wiring(client, config, request)
    networks = request.networks if request.networks is not None else settings.from_env()
    with in_flight(config.name):
        joined, owned = attach(client, networks, config, wired)
        try:
            yield joined, {**owner_labels, **owned}
        except BaseException:
            with contextlib.suppress(CtrexecError):
                release_unless_created(client, files_dir, {**owned, lbl.GROUP: config.name})
            raise


def attach(
    client: Client, networks: Networks, config: TaskConfig, wiring: Wiring
) -> tuple[TaskConfig, dict[str, str]]:
    """Make and wire the container's namespace; the config joined to it and the owner
    labels its record needs. Nothing is made when the name or namespace is taken, and a
    failed wiring removes the namespace again."""
    name = config.name
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
    """Release the network :func:`attach` made after a failed create, unless the
    container exists: then it is its removal that releases (a created container keeps
    its network, as docker's), through :func:`ctrexec.tasks.implicitnet.release`."""
    try:
        containers.get(client, labels[lbl.GROUP])
    except NotFound:
        implicitnet.release(files_dir, labels)
