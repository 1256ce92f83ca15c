"""Containers that nobody will remove: what a killed ``run --rm`` or a cut-short create left.

The rule (one :func:`judge`, pure, so the unit tests pin it down). A ctrexec container
(:data:`~ctrexec.labels.MANAGED`) of the scope's namespace is garbage when it has no
live task (none, or one that has stopped) and, past the grace period,

- it was made with ``--rm`` (:data:`~ctrexec.labels.AUTO_REMOVE`): its run ended, or it
  never started, and whoever should have removed it (the ``run`` that waited, the
  supervisor) is gone; the age is the stopped task's exit, else the run's start
  (:data:`~ctrexec.labels.RUN_STARTED_AT`), else the record's creation;
- or its create never finished: never started, and no root filesystem snapshot (a
  create killed between its record and its snapshot; docker would have no container).

Kept, whatever their age: a plain ``create``/``run`` container without ``--rm`` (the
user's, as docker keeps a stopped container: ``container prune`` removes those), a
container the supervisor is about to restart (:data:`~ctrexec.labels.RESTART_PENDING`),
and the Nomad driver's (:mod:`ctrexec.nomad.dangling` judges those). A create in flight
is younger than the grace period by its label's time, so it is never garbage.

Removal is the Executor's own destroy, so the logs, host files and a ``run -p``
namespace go with the record, as with ``ctrexec rm``; the record is judged again just
before, so a container started since doctor looked is left alone.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ctrexec import labels as lbl
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.tasks import ProcessState, Status
from ctrexec.defaults import DEFAULT_NAMESPACE, RUN_DIR
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.errors import NotFound
from ctrexec.tasks import runs
from ctrexec.tasks.executor import Executor

KIND = "container"


def command(scope: Scope, verb: str, *args: str) -> str:
    """A ctrexec command line for this scope's namespace (the flag only when needed)."""
    flag = [] if scope.namespace == DEFAULT_NAMESPACE else ["--namespace", scope.namespace]
    return " ".join(["ctrexec", verb, *flag, *args])


def _ended(record: containers.Container, task: ProcessState | None) -> datetime | None:
    """When the container's last run ended, as near as is known (see the module doc)."""
    if task is not None and task.exit is not None and task.exit.exited_at is not None:
        return task.exit.exited_at
    run = runs.current(record.labels)
    if run is not None and run.started_at is not None:
        return run.started_at
    return record.created_at


def judge(
    scope: Scope, record: containers.Container, task: ProcessState | None, has_rootfs: bool
) -> Finding | None:
    """The finding for one record, or None when it is not garbage (the module's rule)."""
    labels = record.labels
    if lbl.MANAGED not in labels or lbl.NOMAD_TASK_ID in labels:
        return None
    if task is not None and task.status is not Status.STOPPED:
        return None
    if labels.get(lbl.RESTART_PENDING) == "true":
        return None
    since = _ended(record, task)
    if not scope.old_enough(since):
        return None
    started = runs.current(labels) is not None
    if labels.get(lbl.AUTO_REMOVE) == "true":
        what = "a --rm container whose run ended" if started else "a --rm container never started"
        what += " and that nothing removed"
    elif not started and not has_rootfs:
        what = "a container whose create never finished (no root filesystem)"
    else:
        return None
    return Finding(
        kind=KIND,
        where=record.id,
        what=what,
        fix=command(scope, "rm", record.id),
        since=since,
    )


def _has_rootfs(scope: Scope, record: containers.Container) -> bool:
    if not record.snapshot_key:
        return False
    found = snapshots.stat_snapshot(scope.client, record.snapshot_key, record.snapshotter)
    return found is not None


def _judged(
    scope: Scope, record: containers.Container, task: ProcessState | None
) -> Finding | None:
    never_started = runs.current(record.labels) is None
    needs_rootfs = never_started and record.labels.get(lbl.AUTO_REMOVE) != "true"
    rootfs = _has_rootfs(scope, record) if needs_rootfs else True
    return judge(scope, record, task, rootfs)


def find(scope: Scope) -> list[Finding]:
    managed = scope.managed()
    live = tasks.states_of(scope.client, [r.id for r in managed])
    found = []
    for record in managed:
        task = live.get(record.id)
        if task is not None and task.status is not Status.STOPPED:
            continue  # the common case, with no further call
        finding = _judged(scope, record, task)
        if finding is not None:
            found.append(finding)
    return found


def executor(scope: Scope) -> Executor:
    """The Executor a removal goes through, on the scope's files: its host files and log
    daemon are the defaults unless the scope names a state directory of its own."""
    state_dir = None if scope.state_dir == Path(RUN_DIR) else scope.state_dir
    return Executor(scope.client, log_dir=scope.log_dir, state_dir=state_dir)


def remove(scope: Scope, finding: Finding) -> None:
    try:
        record = containers.get(scope.client, finding.where)
    except NotFound:
        return  # removed since doctor looked: what gc wanted
    if _judged(scope, record, tasks.find(scope.client, record.id)) is None:
        return  # started, or restarted, since: no longer garbage
    executor(scope).destroy(record.id, force=True)


CHECK = Check(kind=KIND, find=find, remove=remove)
