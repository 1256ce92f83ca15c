"""docker's ``container prune`` and ``system prune``, as thin uses of what is there.

``container prune`` removes every stopped ctrexec container of the namespace (docker's
"exited", "created" and "dead": no task, or one that has stopped), each through the
Executor's destroy, so its logs, host files and ``run -p`` network go too. Running
and paused ones stay, as do the Nomad driver's (the driver removes its own). Filters
as docker's: created before ``until``; ``label`` (``key`` or ``key=value``) that
must all match, ``not_label`` that must all not.

``system prune`` is docker's order: stopped containers, then ctrexec's bridge
network when nothing uses it (``network prune``), then dangling images (all unused
ones with ``all_images``: ``image prune -a``); and, ctrexec's own, ``gc``'s garbage
before the network and images, so what a removed container held is already gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.tasks import Status
from ctrexec.doctor import containers as doctor_containers
from ctrexec.doctor.checks import GcReport, gc
from ctrexec.doctor.findings import Scope
from ctrexec.errors import CtrexecError, FailedPrecondition, NotFound
from ctrexec.images.prune import PruneReport, prune_images


@attrs.frozen
class ContainerFilter:
    """docker's ``container prune --filter``: ``until`` and ``label``/``label!``."""

    until: datetime | None = None
    labels: tuple[str, ...] = ()
    not_labels: tuple[str, ...] = ()

    def matches(self, record: containers.Container) -> bool:
        created = record.created_at
        if self.until is not None and (created is None or created >= self.until):
            return False
        has = record.labels
        return all(_has(has, want) for want in self.labels) and not any(
            _has(has, want) for want in self.not_labels
        )


def _has(labels: Mapping[str, str], want: str) -> bool:
    key, sep, value = want.partition("=")
    return key in labels and (not sep or labels[key] == value)


@attrs.frozen
class ContainerPruneReport:
    """The ids removed, the bytes their root filesystems used, and those that stayed."""

    deleted: tuple[str, ...]
    reclaimed: int
    failed: tuple[tuple[str, str], ...] = ()


def stopped(scope: Scope, where: ContainerFilter | None = None) -> list[containers.Container]:
    """The namespace's stopped ctrexec containers that ``where`` matches."""
    found = scope.managed()
    # A task List leaves out (its shim silent, containerd 2.3) is live until it says not.
    states = tasks.states_of(scope.client, [r.id for r in found])
    live = {cid for cid, t in states.items() if t.status is not Status.STOPPED}
    return [
        r
        for r in found
        if r.id not in live
        and lbl.NOMAD_TASK_ID not in r.labels
        and (where is None or where.matches(r))
    ]


def prune_containers(scope: Scope, where: ContainerFilter | None = None) -> ContainerPruneReport:
    """Remove the stopped containers (the module docstring's); one that a start took
    since is refused by destroy and reported in ``failed``, as is any other error."""
    executor = doctor_containers.executor(scope)
    scope.forget()  # this call's listing, not one an earlier call on the scope kept
    deleted, failed, reclaimed = [], [], 0
    for record in stopped(scope, where):
        size = snapshots.snapshot_usage(scope.client, record.snapshot_key, record.snapshotter)
        try:
            executor.destroy(record.id)
        except NotFound:
            continue  # removed by someone else meanwhile
        except CtrexecError as err:
            failed.append((record.id, str(err)))
        else:
            deleted.append(record.id)
            reclaimed += size
    # system prune runs gc on this scope next: what these records held must not look
    # owned by the listing ``stopped`` shared.
    scope.forget()
    return ContainerPruneReport(tuple(deleted), reclaimed, tuple(failed))


@attrs.frozen
class SystemPruneReport:
    """What each part of ``system prune`` removed."""

    containers: ContainerPruneReport
    leftovers: GcReport
    networks: tuple[str, ...]
    images: PruneReport

    @property
    def reclaimed(self) -> int:
        return self.containers.reclaimed + self.images.reclaimed


def prune_system(scope: Scope, *, all_images: bool = False) -> SystemPruneReport:
    """docker's ``system prune`` (``-a``: ``all_images``), plus gc (see the module)."""
    removed = prune_containers(scope)
    leftovers = gc(scope)
    networks: Sequence[str] = ()
    try:
        if scope.networks.remove_bridge():
            networks = (scope.networks.bridge,)
    except FailedPrecondition:
        pass  # in use: not an unused network, so not docker's to prune
    images = prune_images(scope.client, all_images=all_images)
    return SystemPruneReport(removed, leftovers, tuple(networks), images)
