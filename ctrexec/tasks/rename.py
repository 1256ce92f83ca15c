"""``rename``: give a container that is not running another name.

containerd keys a container, its task and its task's cgroup by the container's id, and
Containers.Update cannot change an id. So a rename makes a second record under the new
id, a copy of the first (spec, labels, TaskConfig extension, runtime, image) naming the
*same* snapshot key, and then deletes the old record: containerd's GC holds a snapshot
for every record that names it (see :mod:`ctrexec.tasks.records`), so the rootfs is held
throughout and never copied.

The steps are ordered so that whatever stops them, one of the two records is whole:

1. a stopped task is deleted, after its exit was kept in the record's labels (as a
   start does, :func:`ctrexec.tasks.runs.next_run`), so ``ps -a`` still says how it ended;
2. the new record is created (containerd refuses a name in use here, atomically);
3. the log directory moves to the new name (one rename(2)); a failure undoes step 2;
4. the old record goes.

A running or paused task cannot be renamed: its shim, cgroup and every event name the
old id. Members of a group and tasks of the Nomad driver are refused too: their ids are
derived from the group's or allocation's name, and their owners find them by it. A
``run -p`` container's implicit group is named after it, so it moves: the copy names
``cx-NEW``, the old namespace is released, and the next start wires the new one with
the same ports (:func:`ctrexec.tasks.groupnet.ensure`). The host files' directory is the
new id's, written afresh by that start.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

from ctrexec import _linux
from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import (
    AlreadyExists,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from ctrexec.ids import task_cgroup, validate_id
from ctrexec.net import groupns, hostfiles
from ctrexec.tasks import config as taskconfig
from ctrexec.tasks import implicitnet, runs
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks import output as taskoutput
from ctrexec.tasks import spec as taskspec


class Renamer(Protocol):
    """What a rename needs of :class:`ctrexec.Executor` (which calls it as its
    ``rename`` method): named here so that this module does not import the Executor."""

    @property
    def client(self) -> Client: ...
    @property
    def files_dir(self) -> Path: ...
    @property
    def state_dir(self) -> Path | None: ...
    def reap(self, task_id: str) -> None: ...


def rename(executor: Renamer, old: str, new: str) -> containers.Container:
    """Deprecated for one release: ``executor.rename(old, new)``; issue 38: tasks are
    the Executor's methods, not free functions taking one."""
    warnings.warn(
        "ctrexec.rename is deprecated: use Executor.rename", DeprecationWarning, stacklevel=2
    )
    return rename_container(executor, old, new)


def rename_container(executor: Renamer, old: str, new: str) -> containers.Container:
    """Rename the container ``old`` to ``new``; the new record (:meth:`Executor.rename`)."""
    validate_id(new, kind="container name")
    client = executor.client
    record = containers.get(client, old)
    _refuse_owned(record)
    if new == old:
        raise InvalidArgument(f"container {old} already has the name {new}")
    if _exists(executor, new):
        raise AlreadyExists(f"container name {new!r} is already in use")
    if lbl.IMPLICIT_GROUP in record.labels and Path(groupns.netns_path(new)).exists():
        raise AlreadyExists(
            f"network namespace {groupns.netns_name(new)} already exists (a group named {new}?)"
        )
    record = _drop_stopped_task(executor, record)
    created = _copy_record(executor, record, new)
    try:
        _move_logs(record.labels.get(lbl.LOG_PATH, ""), created.labels.get(lbl.LOG_PATH, ""))
    except BaseException:
        with contextlib.suppress(CtrexecError):  # the old record still holds the snapshot
            containers.delete(client, new)
        raise
    containers.delete(client, old)
    leaf = task_cgroup(client.namespace, old).lstrip("/")  # the old task's cgroup, empty by now
    tasks.wait_until(lambda: _linux.remove_empty_cgroups(leaf, parents=False), timeout=2.0)
    _drop_old_files(record.labels, created.labels)
    if lbl.IMPLICIT_GROUP in record.labels:
        implicitnet.release(executor.files_dir, record.labels)  # the next start wires the new one
    return created


def _drop_old_files(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """The old id's host files go; the next start writes the new id's (they are small,
    and the hosts file of a container with its own network names its new address)."""
    before, after = old.get(lbl.HOSTFILES_DIR), new.get(lbl.HOSTFILES_DIR)
    if before and before != after:
        hostfiles.remove_dir(Path(before))


def _refuse_owned(record: containers.Container) -> None:
    name = record.id
    group = record.labels.get(lbl.GROUP)
    if group and lbl.IMPLICIT_GROUP not in record.labels:
        raise FailedPrecondition(
            f"cannot rename container {name}: it is a member of group {group}, whose "
            "members are named after it; rename the group's file and bring it up again"
        )
    if lbl.NOMAD_TASK_ID in record.labels:
        raise FailedPrecondition(
            f"cannot rename container {name}: it belongs to Nomad task "
            f"{record.labels[lbl.NOMAD_TASK_ID]}, which finds it by name"
        )


def _exists(executor: Renamer, name: str) -> bool:
    try:
        containers.get(executor.client, name)
    except NotFound:
        return False
    return True


def _drop_stopped_task(executor: Renamer, record: containers.Container) -> containers.Container:
    """Refuse a live task; delete a stopped one, its exit kept in the labels first
    (the task's exit is gone with it: containerd keys the task by the old id)."""
    client, name = executor.client, record.id
    state = tasks.find(client, name)
    if state is None:
        return record
    if state.status in (Status.RUNNING, Status.PAUSED, Status.PAUSING):
        raise FailedPrecondition(
            f"cannot rename {state.status.value} container {name}: containerd keys a "
            "task by its container's id; stop it first"
        )
    if state.status is Status.STOPPED and state.exit is not None:
        record = containers.update_labels(
            client, name, _kept_exit(executor, record, state.pid, state.exit)
        )
    if state.status is Status.STOPPED:
        executor.reap(name)  # deletes it and lets the log driver finish the file
        # The log daemon forgets the old path's runs, as it does for a removed container.
        taskoutput.forget(executor.state_dir, log_path=record.labels.get(lbl.LOG_PATH, ""))
    else:  # CREATED: a start that died between Tasks.Create and Tasks.Start
        tasks.force_delete(client, name)
    return record


def _kept_exit(
    executor: Renamer, record: containers.Container, pid: int, exit_status: ExitStatus
) -> dict[str, str | None]:
    """The label that keeps the current run's exit once its task is deleted, in the
    form :func:`ctrexec.tasks.runs.kept_exit` reads (and the next start carries on)."""
    now = runs.current(record.labels)
    run = runs.Run(
        run=now.run if now else 0,
        pid=pid,
        started_at=now.started_at if now else None,
        exit=taskinfo.with_oom(executor.client, {record.id: exit_status})[record.id],
    )
    return {lbl.RUN_PREVIOUS: runs.previous_label(run)}


def _copy_record(executor: Renamer, record: containers.Container, new: str) -> containers.Container:
    """The record under its new id, naming the same snapshot; AlreadyExists in the
    user's words when the name was taken meanwhile."""
    extensions = dict(record.extensions)
    implicit = lbl.IMPLICIT_GROUP in record.labels
    config = taskconfig.config_of(record)
    if config is not None:
        # The hostname stays what it was, as docker's rename keeps it.
        hostname = config.hostname or taskspec.default_hostname(config)
        renamed = attrs.evolve(config, name=new, hostname=hostname)
        if implicit:  # run -p: its namespace and group are named after it
            renamed = attrs.evolve(renamed, group=new, netns=groupns.netns_path(new))
        extensions[lbl.CONFIG_EXTENSION] = containers.json_extension(
            lbl.CONFIG_TYPE_URL, renamed.to_record()
        )
    labels = _renamed_labels(record.labels, record.id, new, executor.client.namespace)
    spec = _renamed_spec(record.spec, record.id, new, implicit)
    spec = _moved_mounts(spec, record.labels.get(lbl.HOSTFILES_DIR), labels.get(lbl.HOSTFILES_DIR))
    try:
        return containers.create(
            executor.client,
            new,
            image=record.image,
            spec=spec,
            snapshotter=record.snapshotter,
            snapshot_key=record.snapshot_key,
            runtime=record.runtime,
            labels=labels,
            extensions=extensions,
        )
    except AlreadyExists as exc:
        raise AlreadyExists(f"container name {new!r} is already in use") from exc


def _renamed_spec(spec: Mapping[str, Any], old: str, new: str, implicit: bool) -> dict[str, Any]:
    """The spec with its cgroup under the new id (ctrexec finds a task's cgroup by it)
    and, for ``run -p``'s implicit group, its namespace and shim group too."""
    out = dict(spec)
    linux = dict(out.get("linux") or {})
    path = linux.get("cgroupsPath")
    if isinstance(path, str) and path.rsplit("/", 1)[-1] == old:
        linux["cgroupsPath"] = f"{path.rsplit('/', 1)[0]}/{new}"
    if implicit:
        linux["namespaces"] = [
            {**ns, "path": groupns.netns_path(new)} if ns.get("type") == "network" else ns
            for ns in linux.get("namespaces") or []
        ]
        annotations = dict(out.get("annotations") or {})
        if annotations.get(lbl.SHIM_GROUP_ANNOTATION) == old:
            annotations[lbl.SHIM_GROUP_ANNOTATION] = new
            out["annotations"] = annotations
    out["linux"] = linux
    return out


def _moved_mounts(spec: dict[str, Any], old: str | None, new: str | None) -> dict[str, Any]:
    """The host files' bind mounts from the old id's directory to the new one's."""
    if not old or not new or old == new:
        return spec

    def moved(mount: dict[str, Any]) -> dict[str, Any]:
        source = mount.get("source")
        if isinstance(source, str) and Path(source).parent == Path(old):
            return {**mount, "source": str(Path(new) / Path(source).name)}
        return mount

    return {**spec, "mounts": [moved(m) for m in spec.get("mounts") or []]}


def _renamed_labels(
    labels: Mapping[str, str], old: str, new: str, namespace: str
) -> dict[str, str]:
    """The labels with the paths keyed by the id moved to the new one; for ``run -p``'s
    implicit group also its group and namespace (its address comes with the next start)."""
    out = dict(labels)
    log_path = out.get(lbl.LOG_PATH)
    if log_path and Path(log_path).parent.name == old:
        out[lbl.LOG_PATH] = str(Path(log_path).parent.parent / new / Path(log_path).name)
    files = out.get(lbl.HOSTFILES_DIR)
    if files and Path(files).name == f"{namespace}+{old}":
        out[lbl.HOSTFILES_DIR] = str(Path(files).parent / f"{namespace}+{new}")
    if lbl.IMPLICIT_GROUP in out:
        out[lbl.GROUP] = new
        out[lbl.NETNS_PATH] = groupns.netns_path(new)
        out.pop(lbl.ADDRESSES, None)
    return out


def _move_logs(old_path: str, new_path: str) -> None:
    """Move the log directory (one rename(2)); nothing to do when there is none yet."""
    if not old_path or old_path == new_path:
        return
    source, target = Path(old_path).parent, Path(new_path).parent
    if not source.exists():
        return
    try:
        os.rename(source, target)  # noqa: PTH104 - one syscall, refused over a non-empty dir
    except OSError as exc:
        raise FailedPrecondition(f"cannot move the logs from {source} to {target}: {exc}") from exc
