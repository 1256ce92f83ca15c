"""Groups: one network namespace plus its tasks, described in a group file (:mod:`.spec`).

A group is what a scheduler calls an allocation. ``up`` creates (or, after a crash,
finds again) the namespace, wires it, and starts every task; ``down`` stops and
deletes the tasks, runs CNI DEL, and removes the namespace. Nothing is stored
outside containerd's labels, the pinned netns file and CNI's own cache, so ``up``
after a crash reuses the surviving namespace and address instead of allocating again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ctrexec import inflight, owners
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError, FailedPrecondition, NotFound
from ctrexec.groups import changes, missing, outage
from ctrexec.groups.spec import GroupSpec
from ctrexec.ids import validate_id
from ctrexec.images import lookup
from ctrexec.net import groupns, hostfiles, netns, settings
from ctrexec.net.networks import NetworkMode, Networks, parse_mode, parse_port
from ctrexec.net.ports import PortMapping
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import grouplock, groupnet, health, implicitnet, teardown
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.reports import TaskInfo


def _members(spec: GroupSpec, configs: list[TaskConfig]) -> str:
    """The group's tasks as the label :data:`~ctrexec.labels.GROUP_MEMBERS` lists them."""
    return hostfiles.format_members(
        [
            hostfiles.Member(cfg.name, task.name, cfg.hostname or spec.name)
            for task, cfg in zip(spec.tasks, configs, strict=True)
        ]
    )


def _addresses(existing: Iterable[containers.Container]) -> list[str]:
    """The address the group's members say it had, asked for again when re-made."""
    for record in existing:
        if found := [a for a in record.labels.get(lbl.ADDRESSES, "").split(",") if a]:
            return found
    return []


class Groups:
    """Group operations over one Executor and one Networks."""

    def __init__(self, executor: Executor, networks: Networks) -> None:
        self.executor = executor
        self.networks = networks

    def members(self, name: str) -> list[containers.Container]:
        return containers.list_containers(
            self.executor.client, containers.label_filter(lbl.GROUP, name)
        )

    def ps(self, name: str) -> list[TaskInfo]:
        """The group's members, with "not attached" when its eth0, veth or bridge is gone
        (``ps`` leaves that netlink check out)."""
        infos = [i for i in self.executor.list(all_tasks=True) if i.group == name]
        return health.attachment_problems(infos)

    def missing(self, name: str) -> list[str]:
        """The members the group's labels name that have no container (see :mod:`.missing`)."""
        return missing.missing(self.members(name))

    @staticmethod
    def missing_message(name: str, member: str) -> str:
        """The line that says ``member`` of group ``name`` is missing and what makes it
        again: the supervisor logs it and doctor reports it, so a front end that shows
        :meth:`missing` says it in the same words."""
        return missing.report(name, member)

    def names(self) -> list[str]:
        found = {c.labels.get(lbl.GROUP, "") for c in self._managed()}
        return sorted(n for n in found if n)

    def _managed(self) -> list[containers.Container]:
        return containers.list_containers(
            self.executor.client, containers.label_filter(lbl.MANAGED, "true")
        )

    def up(
        self,
        spec: GroupSpec,
        *,
        force_recreate: bool = False,
        on_change: Callable[[str], None] | None = None,
    ) -> list[TaskInfo]:
        """Create or recover the group, then make every task run.

        Of an edited file, only the members whose definition changed are recreated
        (all of them with ``force_recreate``), and members no longer in the file are
        removed; the namespace, its address and ports stay (see :mod:`.changes`).
        ``on_change`` is told each member recreated or removed, once it was.
        The group's pin is this create's (:mod:`ctrexec.inflight`) until its members'
        records exist: gc leaves it alone meanwhile.
        """
        configs = spec.task_configs()
        for cfg in configs:  # images first: a missing one stops everything, untouched
            lookup.ensure_image(
                self.executor.client,
                cfg.image,
                platform=cfg.platform,
                snapshotter=cfg.snapshotter,
            )
        # One operator at a time: a second up waits here, then finds the first's group
        # (a pull is no act on the group: it stays outside, not to hold the others up).
        # The group's lock is taken first, then the pin's in-flight lock (gc's): gc never
        # waits for the second, so the order cannot deadlock.
        with (
            grouplock.hold(self.executor.client, spec.name),
            inflight.creating(inflight.netns_key(spec.netns_name)),
        ):
            return self._up(spec, configs, force_recreate, on_change)

    def _up(
        self,
        spec: GroupSpec,
        configs: list[TaskConfig],
        force_recreate: bool,
        on_change: Callable[[str], None] | None,
    ) -> list[TaskInfo]:
        digest = spec.digest()
        existing = self.members(spec.name)
        todo = changes.plan(spec, configs, existing, force=force_recreate)
        wiring = parse_mode(spec.network), [parse_port(p) for p in spec.ports]
        # The pin checked against the running members first: pinned again from one of
        # them (same namespace, same address), a split refused; with none running and
        # the pin gone, the old attachment is released before a new one is made.
        pin = groupnet.repair(self.executor.client, spec.name, spec.netns_path)
        if existing and pin.lost and not pin.members:
            self._release_network(spec.name, spec.network)
        fresh = not existing and not Path(spec.netns_path).exists()
        gone = self._retire(existing, todo, on_change)
        existing = [c for c in existing if c.id not in gone]
        made: list[str] = []
        try:
            prefer = _addresses(existing) or _addresses(gone.values())
            shared = self._wire(spec, configs, existing, wiring, prefer)
            self._relabel(existing, digest, shared)
            known = {c.id: c.labels for c in existing}
            for cfg in configs:
                if cfg.name not in known:
                    self._make_member(cfg, spec, shared, known, recreated=cfg.name in gone)
                    made.append(cfg.name)
                    if cfg.name in gone and on_change is not None:
                        on_change(f"recreated {cfg.name}")
                state = self.executor.inspect(cfg.name, addresses=False)
                if state.status not in (Status.RUNNING, Status.PAUSED):
                    self.executor.start(cfg.name)
        except BaseException as exc:
            left = self._undo(made)
            if fresh and not left:  # a member left may run in it: it stays for the rerun
                self._release_network(spec.name, spec.network)
            client = self.executor.client
            if isinstance(exc, CtrexecError) and outage.gone(client, exc):
                raise outage.lost(spec.name, client.address, left) from exc
            raise
        return self.ps(spec.name)

    def _wire(
        self,
        spec: GroupSpec,
        configs: list[TaskConfig],
        existing: list[containers.Container],
        wiring: tuple[NetworkMode, list[PortMapping]],
        prefer: list[str],
    ) -> dict[str, str]:
        """Make the namespace and attach it (asking for ``prefer``, the address it had);
        return the labels every member shares: what its /etc/hosts says (see
        ctrexec.tasks.files). Members re-attached without their address follow."""
        client = self.executor.client
        owner = owners.Owner(client.address, client.namespace, spec.name)
        ns = netns.create(spec.netns_name, exist_ok=True, owner=owner)
        attachment = self.networks.setup(
            spec.name,
            ns.path,
            *wiring,
            prefer=prefer,
            held=self._held(spec.name),
        )
        shared = {lbl.GROUP_MEMBERS: _members(spec, configs)}
        if attachment.addresses():
            shared[lbl.ADDRESSES] = ",".join(attachment.addresses())
            for c in existing:
                implicitnet.readdress(self.executor.client, c, shared[lbl.ADDRESSES])
        return shared

    def _retire(
        self,
        existing: list[containers.Container],
        todo: changes.Changes,
        on_change: Callable[[str], None] | None,
    ) -> dict[str, containers.Container]:
        """Stop and remove the members to recreate and those no longer in the file;
        return them by id. The namespace stays: it is pinned, not theirs."""
        ids = [*todo.recreate, *todo.removed]
        if not ids:
            return {}
        ex = self.executor
        teardown.stop_and_destroy(
            ids, stop=ex.stop_many, destroy=lambda task_id: ex.destroy(task_id, force=True)
        )
        if on_change is not None:
            for task_id in todo.removed:
                on_change(f"removed {task_id}, no longer in the group file")
        return {c.id: c for c in existing if c.id in ids}

    def _relabel(
        self, kept: list[containers.Container], digest: str, shared: Mapping[str, str]
    ) -> None:
        """The members left running take the new definition's hash and member list;
        their /etc/hosts is written again when the members changed."""
        for record in kept:
            wanted = {lbl.GROUP_SPEC: digest, lbl.GROUP_MEMBERS: shared[lbl.GROUP_MEMBERS]}
            if all(record.labels.get(k) == v for k, v in wanted.items()):
                continue
            now = containers.update_labels(self.executor.client, record.id, wanted)
            taskfiles.rewrite_hosts(now.id, now.labels, taskconfig.config_of(now))

    def _undo(self, made: list[str]) -> list[str]:
        """Destroy the members this up made; return those it could not."""
        left = []
        for task_id in made:
            try:
                self.executor.destroy(task_id, force=True)
            except NotFound:
                continue  # gone already
            except CtrexecError:
                left.append(task_id)
        return left

    def _make_member(
        self,
        cfg: TaskConfig,
        spec: GroupSpec,
        shared: Mapping[str, str],
        known: Mapping[str, Mapping[str, str]],
        *,
        recreated: bool,
    ) -> None:
        """Create a member that has no record: one ``up`` has just removed to recreate
        it, or one deleted outside ctrexec, whose log and host files are still there."""
        if not recreated:
            roots = [Path(cfg.log_dir)] if cfg.log_dir else []
            missing.remove_files(self.executor, cfg.name, known, roots)
        owned = {
            lbl.GROUP_SPEC: spec.digest(),
            lbl.MEMBER_SPEC: changes.member_digest(cfg),
            lbl.NETWORK_MODE: spec.network,
            # How the namespace was wired, so any start can wire it again (groupnet).
            lbl.NETWORK_SETTINGS: settings.to_label(self.networks),
            **shared,
        }
        if spec.ports:  # what TaskInfo.ports says, without reading CNI's cache
            owned[lbl.GROUP_PORTS] = ",".join(spec.ports)
        self.executor.create(cfg, owner_labels=owned)

    def down(self, name: str, *, timeout: float | None = None) -> None:
        """Stop (stop signal, then SIGKILL after the timeout) and remove everything."""
        validate_id(name, kind="group name")
        with grouplock.hold(self.executor.client, name):  # one operator at a time
            self._down(name, timeout)

    def _down(self, name: str, timeout: float | None) -> None:
        members = self.members(name)
        nets = _wired_with(members, self.networks)
        has_network = any(a.owner == name for a in nets.attachments())
        if not members and not Path(groupns.netns_path(name)).exists() and not has_network:
            raise FailedPrecondition(f"group {name} does not exist")
        modes = {c.labels.get(lbl.NETWORK_MODE, "bridge") for c in members}
        ex = self.executor
        teardown.stop_and_destroy(
            [c.id for c in members],
            stop=lambda ids: ex.stop_many(ids, timeout=timeout),
            destroy=lambda task_id: ex.destroy(task_id, force=True),
        )
        for gone in missing.missing(members):  # deleted outside ctrexec: its files remain
            missing.remove_files(ex, gone, {c.id: c.labels for c in members})
        for a in nets.attachments():
            if a.owner == name:
                modes.add(a.mode)
        ports, addresses = _recorded(members)
        for mode in modes or {"none"}:
            self._release_network(name, mode, ports=ports, addresses=addresses, networks=nets)

    def _release_network(
        self, name: str, mode: str, *, ports: Sequence[PortMapping] = (),
        addresses: Sequence[str] = (), networks: Networks | None = None,
    ) -> None:  # fmt: skip
        nets = self.networks if networks is None else networks
        groupns.release(nets, self.executor.files_dir, name, mode, ports=ports, addresses=addresses)

    def _held(self, name: str) -> dict[str, str]:
        """The addresses other groups' records say they hold (address -> group)."""
        held = {}
        for record in self._managed():
            group = record.labels.get(lbl.GROUP, "")
            if group and group != name:
                for address in _split(record.labels.get(lbl.ADDRESSES)):
                    held[address] = group
        return held


def _wired_with(members: list[containers.Container], default: Networks) -> Networks:
    """The network settings the group was wired with, as its members' labels record them
    (:data:`~ctrexec.labels.NETWORK_SETTINGS`): a ``group down`` run with another
    environment (another CNI cache or IPAM directory) still releases what ``up`` made.
    A group made before the label existed has only the caller's settings."""
    for record in members:
        text = record.labels.get(lbl.NETWORK_SETTINGS)
        if text:
            return settings.from_label(text)
    return default


def _split(text: str | None) -> list[str]:
    return [part for part in (text or "").split(",") if part]


def _recorded(members: list[containers.Container]) -> tuple[list[PortMapping], list[str]]:
    """The ports and addresses the members' labels record, for a DEL without the cache."""
    ports: list[PortMapping] = []
    addresses: list[str] = []
    for record in members:
        for text in _split(record.labels.get(lbl.GROUP_PORTS)):
            with contextlib.suppress(CtrexecError):  # a label we did not write
                if (port := parse_port(text)) not in ports:
                    ports.append(port)
        addresses += [a for a in _split(record.labels.get(lbl.ADDRESSES)) if a not in addresses]
    return ports, addresses
