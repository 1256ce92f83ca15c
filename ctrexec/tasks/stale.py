"""What a ctrexec killed inside Tasks.Create leaves in the way of the next one.

containerd cancels such a call halfway (see :mod:`ctrexec.containerd.bundles`): no
task is listed, but the bundle stays, often with its shim and a ``runc init`` under
it, and every later Tasks.Create of that id fails with ``mkdir <bundle>: file
exists``. Or containerd's own cleanup of that cancelled create removes the bundle of
the next one as its shim starts (``getwd``, or 2.x's ``open <bundle>/shim-binary-path``:
no such file or directory): that create is sent again as it is. Every start goes
through :func:`create_task` (``run``, ``start``, ``group up``, the supervisor), so each
of them completes such a container:
the container half made under the shim is deleted, the shim is stopped when it serves
nothing else (as destroy stops an orphaned shim), and once containerd's own cleanup of
that shim has had its time, whatever is left of the bundle is removed; then the create
is sent again. The happy path costs nothing: only those errors are acted on.

A removal's leftovers are here too, and so is the removal itself (:func:`destroy`,
the body of :meth:`Executor.destroy` and of stop's removal of an auto-remove task):
it loads with the first removal, not for ``ps``, and with what it clears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ctrexec import _linux, ids, owners
from ctrexec import labels as lbl
from ctrexec.containerd import bundles, containers, runtimes, snapshots, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError, FailedPrecondition, NotFound
from ctrexec.logs.orphaned_shims import stop_orphaned_drivers, stop_orphaned_drivers_of
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import implicitnet, records
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks import volumes as volstore

#: A bundle, then its work directory, can each be in the way once.
_ATTEMPTS = 3
#: How long containerd's cleanup of a stopped shim may take to remove the bundle.
CLEANUP_WAIT = 10.0


def create_task(client: Client, record: containers.Container, create: Callable[[], int]) -> int:
    """``create()`` (a Tasks.Create of ``record``), cleared of a cancelled create's
    leftovers and sent again when that is what stops it."""
    for _ in range(_ATTEMPTS - 1):
        try:
            return create()
        except CtrexecError as exc:
            if bundles.vanished(exc, client.namespace, record.id):
                continue
            path = bundles.left_by(exc, client.namespace, record.id)
            if path is None:
                raise
            clear(client, record, path)
    return create()


def clear(client: Client, record: containers.Container, path: Path) -> None:
    """Delete the half-made container in ``path``, stop its shim if it serves nothing
    else, and remove the directory containerd no longer knows."""
    bundles.delete_container(
        path,
        shim_binary=runtimes.shim_binary(record.runtime.name),
        address=client.address,
        namespace=client.namespace,
        container_id=record.id,
    )
    log_path = record.labels.get(lbl.LOG_PATH, "")
    stopped = stop_orphaned_drivers(log_path, client.namespace, record.id)
    # containerd still watches a shim it cancelled a create on: once that shim is gone,
    # its cleanup runs the shim's delete and removes the bundle. Let it finish first,
    # or it could remove the bundle of the create sent next.
    if stopped:
        tasks.wait_until(lambda: not path.exists(), timeout=CLEANUP_WAIT)
    bundles.remove(path)


def after_delete(client: Client, record: containers.Container, batch: Batch | None = None) -> None:
    """What a create sent by a ctrexec that died mid-call can still do once ``record``
    is deleted: the Create can land after the task's first delete (containerd does not
    refuse it for a deleted container), and a Create that containerd cancelled can leave
    a shim serving nothing, with our log driver, that containerd no longer knows
    (containerd 1.6). With the log daemon's FIFOs such a shim has no child at all, as
    has the shim of a group whose other tasks have all stopped: that one is not looked
    at. In a ``batch``, the look for such shims is left to its :meth:`Batch.finish`."""
    tasks.force_delete(client, record.id)
    if batch is None:
        _stop_orphans(client, [record])
    else:
        batch.deleted.append(record)


def _stop_orphans(client: Client, records: Sequence[containers.Container]) -> None:
    """:func:`after_delete`'s shims, for deleted ``records`` together: each group's
    remaining members listed once, the host's processes scanned once."""
    groups = {r.labels.get(lbl.GROUP) for r in records}
    shared = {group: taskinfo.shim_shared(client, group) for group in groups}
    logged = [
        (r.labels[lbl.LOG_PATH], r.id)
        for r in records
        if r.labels.get(lbl.LOG_PATH) and not shared[r.labels.get(lbl.GROUP)]
    ]
    if logged:
        stop_orphaned_drivers_of(logged, client.namespace)


class Batch:
    """What the removals of many (:meth:`Removing.remove_many`) leave to their end, so
    that a removal costs one task's work however many are removed: each would list the
    namespace (are the cgroup parents free to go?) and scan every process on the host
    (orphaned shims), both growing with the number of tasks. A task removed in a batch
    is done with but for these; :meth:`finish` does them once for all, when the batch's
    other removals no longer hold the parents and no later removal could do better."""

    def __init__(self) -> None:
        self.deleted: list[containers.Container] = []
        self.leaf: str | None = None

    def finish(self, client: Client) -> None:
        """The batch's :func:`after_delete` shims, then the cgroup parents if no
        container of the namespace remains (as a single destroy of the last one)."""
        deleted, self.deleted = self.deleted, []
        if deleted:
            _stop_orphans(client, deleted)
        leaf, self.leaf = self.leaf, None
        if leaf is not None and not containers.list_containers(client):
            _linux.remove_empty_cgroups(leaf, parents=True)


def orphaned_rootfs(client: Client, name: str, snapshotter: str) -> list[str]:
    """Remove the rootfs snapshots of ``name`` that no record holds any more: a destroy
    cut short between the record's delete and its snapshot's leaves one, which
    containerd's GC collects only at a pass of its own (1.7 and 2.x: not at once). The
    keys removed.
    """
    held = {r.snapshot_key for r in containers.list_containers(client)}
    removed = []
    # Not filtered by kind in containerd: 1.6 and 1.7 have no such filter field.
    for snap in snapshots.list_snapshots(client, snapshotter):
        mine = snap.kind == "active" and records.is_snapshot_key_of(snap.name, name)
        if mine and snap.name not in held:
            snapshots.remove_snapshot(client, snap.name, snapshotter)
            removed.append(snap.name)
    return removed


def destroy(
    client: Client,
    task_id: str,
    *,
    files_dir: Path,
    state_dir: Path | None,
    force: bool = False,
    volumes: bool = False,
    batch: Batch | None = None,
) -> None:
    """Remove task, container, snapshot, logs and host files (see :meth:`Executor.destroy`);
    the caller holds the task's lock.

    Without a record, what a removal cut short left (the id's host files, a rootfs
    snapshot no record holds) is removed still, then NotFound is raised. In a
    ``batch``, the orphaned shims and the cgroup parents are left to its
    :meth:`Batch.finish`.
    """
    try:
        record = containers.get(client, task_id)
    except NotFound:
        ns = client.namespace
        hostfiles.remove_dir(hostfiles.task_dir(files_dir, ns, task_id).directory)
        orphaned_rootfs(client, task_id, snapshots.DEFAULT_SNAPSHOTTER)
        raise
    state = tasks.find(client, task_id)
    if state is not None and state.status is not Status.STOPPED and not force:
        raise FailedPrecondition(
            f"container {task_id} is {state.status.value}; stop it first or force"
        )
    tasks.force_delete(client, task_id)
    # A process left in the task's cgroup is no task's now (a runc init whose
    # create was cut short): killed before its rootfs is taken away.
    _linux.kill_cgroup_procs(ids.task_cgroup(client.namespace, task_id).lstrip("/"))
    taskfiles.remove(client, record, state_dir=state_dir)
    if record.labels.get(lbl.IMPLICIT_GROUP):  # run --network: its namespace goes too
        implicitnet.release(files_dir, record.labels)
    containers.delete(client, task_id)
    after_delete(client, record, batch)
    snapshots.remove_snapshot(client, record.snapshot_key, record.snapshotter)
    if volumes or record.labels.get(lbl.AUTO_REMOVE) == "true":
        volstore.remove_anonymous(client.namespace, record.labels)
    # The task's own cgroup can outlive Delete for a moment while the kernel
    # finishes tearing down its processes; the parents go with the last task.
    leaf = ids.task_cgroup(client.namespace, task_id).lstrip("/")
    last = batch is None and not containers.list_containers(client)
    if batch is not None:
        batch.leaf = leaf
    if tasks.wait_until(lambda: _linux.remove_empty_cgroups(leaf, parents=last), 2.0):
        owners.forget(owners.task_record(state_dir, client.namespace, task_id))
