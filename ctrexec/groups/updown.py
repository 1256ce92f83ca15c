"""Groups: one network namespace plus its tasks, described in a group file (:mod:`.spec`).

A group is what a scheduler calls an allocation. ``up`` creates (or, after a crash,
finds again) the namespace, wires it, and starts every task; ``down`` stops and
deletes the tasks, runs CNI DEL, and removes the namespace. Nothing is stored
outside containerd's labels, the pinned netns file and CNI's own cache, so ``up``
after a crash reuses the surviving namespace and address instead of allocating again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import Status
from ctrexec.errors import AlreadyExists, CtrexecError, FailedPrecondition, NotFound
from ctrexec.groups import missing, outage
from ctrexec.groups.spec import GroupSpec
from ctrexec.ids import validate_id
from ctrexec.images import lookup
from ctrexec.net import groupns, hostfiles, netns
from ctrexec.net.networks import Networks, parse_mode, parse_port
from ctrexec.tasks import teardown
from ctrexec.tasks.config import TaskConfig, TaskInfo
from ctrexec.tasks.executor import Executor


def _members(spec: GroupSpec, configs: list[TaskConfig]) -> str:
    """The group's tasks as the label :data:`~ctrexec.labels.GROUP_MEMBERS` lists them."""
    return hostfiles.format_members(
        [
            hostfiles.Member(cfg.name, task["name"], cfg.hostname or spec.name)
            for task, cfg in zip(spec.tasks, configs, strict=True)
        ]
    )


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
        return [i for i in self.executor.list(all_tasks=True) if i.group == name]

    def missing(self, name: str) -> list[str]:
        """The members the group's labels name that have no container (see :mod:`.missing`)."""
        return missing.missing(self.members(name))

    def names(self) -> list[str]:
        found = {c.labels.get(lbl.GROUP, "") for c in self._managed()}
        return sorted(n for n in found if n)

    def _managed(self) -> list[containers.Container]:
        return containers.list_containers(
            self.executor.client, containers.label_filter(lbl.MANAGED, "true")
        )

    def up(self, spec: GroupSpec) -> list[TaskInfo]:
        """Create or recover the group, then make every task run."""
        digest = spec.digest()
        existing = self.members(spec.name)
        other = [c.id for c in existing if c.labels.get(lbl.GROUP_SPEC) != digest]
        if other:
            raise AlreadyExists(
                f"group {spec.name} already exists with another definition; run group down first"
            )
        mode = parse_mode(spec.network)
        ports = [parse_port(p) for p in spec.ports]
        configs = spec.task_configs()
        for cfg in configs:  # images first: a missing one stops everything, untouched
            lookup.ensure_image(self.executor.client, cfg.image, snapshotter=cfg.snapshotter)
        fresh = not existing and not Path(spec.netns_path).exists()
        made: list[str] = []
        try:
            ns = netns.create(spec.netns_name, exist_ok=True)
            attachment = self.networks.setup(spec.name, ns.path, mode, ports)
            # What every member's /etc/hosts says (see ctrexec.tasks.files).
            shared = {lbl.GROUP_MEMBERS: _members(spec, configs)}
            if attachment.addresses():
                shared[lbl.ADDRESSES] = ",".join(attachment.addresses())
            have = {c.id for c in existing}
            known = {c.id: c.labels for c in existing}
            for cfg in configs:
                if cfg.name not in have:  # a member deleted outside ctrexec left its files
                    roots = [Path(cfg.log_dir)] if cfg.log_dir else []
                    missing.remove_files(self.executor, cfg.name, known, roots)
                    self._create_member(cfg, digest, spec, shared)
                    made.append(cfg.name)
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

    def _create_member(
        self, cfg: TaskConfig, digest: str, spec: GroupSpec, shared: Mapping[str, str]
    ) -> None:
        owned = {lbl.GROUP_SPEC: digest, lbl.NETWORK_MODE: spec.network, **shared}
        if spec.ports:  # what TaskInfo.ports says, without reading CNI's cache
            owned[lbl.GROUP_PORTS] = ",".join(spec.ports)
        self.executor.create(cfg, owner_labels=owned)

    def down(self, name: str, *, timeout: float | None = None) -> None:
        """Stop (stop signal, then SIGKILL after the timeout) and remove everything."""
        validate_id(name, kind="group name")
        members = self.members(name)
        has_network = any(a.owner == name for a in self.networks.attachments())
        if not members and not Path(groupns.netns_path(name)).exists() and not has_network:
            raise FailedPrecondition(f"group {name} does not exist")
        modes = {c.labels.get(lbl.NETWORK_MODE, "bridge") for c in members}
        ex = self.executor
        teardown.stop_and_destroy(
            [c.id for c in members],
            stop=lambda task_id: ex.stop(task_id, timeout=timeout),
            destroy=lambda task_id: ex.destroy(task_id, force=True),
        )
        for gone in missing.missing(members):  # deleted outside ctrexec: its files remain
            missing.remove_files(ex, gone, {c.id: c.labels for c in members})
        for a in self.networks.attachments():
            if a.owner == name:
                modes.add(a.mode)
        for mode in modes or {"none"}:
            self._release_network(name, mode)

    def _release_network(self, name: str, mode: str) -> None:
        groupns.release(self.networks, self.executor.files_dir, name, mode)
