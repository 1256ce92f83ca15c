"""Removing a container and all that is its: the body of :meth:`Executor.destroy`.

Its own module so that :meth:`Executor.stop` of an auto-remove task can remove it under
the same per-task lock it stopped it with (no start from elsewhere slips in between),
and so that what only a removal needs loads with the first removal, not for ``ps``.
"""

from __future__ import annotations

from pathlib import Path

from ctrexec import _linux, ids, owners
from ctrexec import labels as lbl
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import FailedPrecondition, NotFound
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks import implicitnet, stale
from ctrexec.tasks import volumes as volstore


def destroy(
    client: Client,
    task_id: str,
    *,
    files_dir: Path,
    state_dir: Path | None,
    force: bool = False,
    volumes: bool = False,
) -> None:
    """Remove task, container, snapshot, logs and host files (see :meth:`Executor.destroy`);
    the caller holds the task's lock.

    Without a record, what a removal cut short left (the id's host files, a rootfs
    snapshot no record holds) is removed still, then NotFound is raised.
    """
    try:
        record = containers.get(client, task_id)
    except NotFound:
        ns = client.namespace
        hostfiles.remove_dir(hostfiles.task_dir(files_dir, ns, task_id).directory)
        stale.orphaned_rootfs(client, task_id, snapshots.DEFAULT_SNAPSHOTTER)
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
    stale.after_delete(client, record)
    snapshots.remove_snapshot(client, record.snapshot_key, record.snapshotter)
    if volumes or record.labels.get(lbl.AUTO_REMOVE) == "true":
        volstore.remove_anonymous(client.namespace, record.labels)
    # The task's own cgroup can outlive Delete for a moment while the kernel
    # finishes tearing down its processes; the parents go with the last task.
    leaf = ids.task_cgroup(client.namespace, task_id).lstrip("/")
    last = not containers.list_containers(client)
    if tasks.wait_until(lambda: _linux.remove_empty_cgroups(leaf, parents=last), 2.0):
        owners.forget(owners.task_record(state_dir, client.namespace, task_id))
