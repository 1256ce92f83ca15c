"""What the executor says about a task: inspect, list, recover, and the run labels.

Kept apart from :mod:`ctrexec.executor`, which only delegates here: a scheduler's
questions (which run is this, how did it end, where can it be reached) read labels,
task state, cgroup counters and the namespace, and write nothing but the run labels
at each start (:func:`record_start`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import datetime

import attrs

from ctrexec import labels as lbl
from ctrexec import runs
from ctrexec.containerd import containers, stats, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, HandleMismatch, InvalidArgument, NotFound
from ctrexec.net import netns
from ctrexec.net.cni import PortMapping
from ctrexec.net.netns import Address
from ctrexec.taskconfig import TaskConfig, TaskHandle, TaskInfo


def config_of(record: containers.Container) -> TaskConfig | None:
    """The TaskConfig the record was made from; None for a record ctrexec cannot read."""
    data = record.extension_json(lbl.CONFIG_EXTENSION)
    if data is None:
        return None
    try:
        return TaskConfig.from_json(data)
    except InvalidArgument:
        return None


def with_oom(client: Client, exits: Mapping[str, ExitStatus]) -> dict[str, ExitStatus]:
    """The exits with ``oom_killed`` set where the task's cgroup saw an OOM kill.

    containerd forgets OOM events, but a stopped task keeps its cgroup (and so the
    kernel's oom_kill counter) until it is deleted, which is exactly as long as its
    exit status lives: no supervisor is needed, and nothing is written. Only a
    SIGKILL exit can be an OOM kill, so others cost no Metrics call.
    """
    out = dict(exits)
    killed = [cid for cid, e in exits.items() if e.code == tasks.SIGKILL_EXIT_CODE]
    try:
        metrics = tasks.metrics_of(client, killed)
    except CtrexecError:
        return out  # best effort: an exit without the OOM fact beats no answer
    for cid, data in metrics.items():
        with contextlib.suppress(CtrexecError):
            if stats.oom_kills(data) > 0:
                out[cid] = attrs.evolve(out[cid], oom_killed=True)
    return out


def group_ports(labels: Mapping[str, str]) -> tuple[PortMapping, ...]:
    from ctrexec.net.ports import parse_port

    out = []
    for text in filter(None, labels.get(lbl.GROUP_PORTS, "").split(",")):
        with contextlib.suppress(InvalidArgument):
            out.append(parse_port(text))
    return tuple(out)


def addresses_of(record: containers.Container, pid: int) -> tuple[Address, ...] | None:
    """The task's namespace's addresses but loopback's; None when there is no
    namespace of its own to look in (host networking, a stopped ``none`` task) or it
    is gone. A netlink dump, in a thread that enters the namespace (no fork)."""
    mode = record.labels.get(lbl.NETNS_MODE, "none")
    path = record.labels.get(lbl.NETNS_PATH) if mode == "path" else None
    if mode == "none" and pid > 0:
        path = f"/proc/{pid}/ns/net"  # a fresh namespace, alive as long as its task
    if not path:
        return None
    try:
        found = netns.inspect(path)
    except CtrexecError:
        return None
    return tuple(a for a in found.addresses if a.ifname != "lo")


def build(
    record: containers.Container,
    state: tasks.ProcessState | None,
    last_exit: ExitStatus | None = None,
    *,
    addresses: bool = False,
) -> TaskInfo:
    """The latest run's info from the record and its task (``last_exit``: the task's
    exit with the OOM fact added)."""
    labels = record.labels
    now, before = runs.current(labels), runs.previous(labels)
    exit_status = last_exit or (state.exit if state else None)
    if state is None and now is not None and before is not None and before.run == now.run:
        exit_status = before.exit  # its task was deleted, its exit kept (record_exit)
    pid = state.pid if state else 0
    return TaskInfo(
        id=record.id,
        image=labels.get(lbl.IMAGE_REF, record.image),
        status=state.status if state else Status.CREATED,
        pid=pid,
        exit=exit_status,
        netns_path=labels.get(lbl.NETNS_PATH),
        netns_mode=labels.get(lbl.NETNS_MODE, "none"),
        group=labels.get(lbl.GROUP),
        log_path=labels.get(lbl.LOG_PATH, ""),
        labels=labels,
        created_at=record.created_at,
        config=config_of(record),
        run=now.run if now else 0,
        started_at=now.started_at if now else None,
        restart_count=_count(labels.get(lbl.RESTART_COUNT)),
        ports=group_ports(labels),
        addresses=addresses_of(record, pid) if addresses else None,
    )


def _count(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def inspect(client: Client, task_id: str, *, addresses: bool = True) -> TaskInfo:
    record = containers.get(client, task_id)
    state = tasks.find(client, task_id)
    exits = with_oom(client, {task_id: state.exit} if state and state.exit else {})
    return build(record, state, exits.get(task_id), addresses=addresses)


def list_infos(client: Client, *, all_tasks: bool, addresses: bool = False) -> list[TaskInfo]:
    """Every managed container's info, sorted by id; only running and paused ones
    unless ``all_tasks``. Three calls whatever the count, plus a Metrics call for
    SIGKILLed tasks and, if ``addresses``, a netlink dump per task."""
    records = containers.list_containers(client, containers.label_filter(lbl.MANAGED, "true"))
    states = {t.container_id: t for t in tasks.list_tasks(client)}
    if not all_tasks:
        records = [
            r
            for r in records
            if r.id in states and states[r.id].status in (Status.RUNNING, Status.PAUSED)
        ]
    exits = with_oom(client, {r.id: s.exit for r in records if (s := states.get(r.id)) and s.exit})
    infos = [build(r, states.get(r.id), exits.get(r.id), addresses=addresses) for r in records]
    return sorted(infos, key=lambda i: i.id)


def recover(client: Client, handle: TaskHandle, *, addresses: bool = True) -> TaskInfo:
    """The state of the handle's run: the latest one's, or, when the container was
    started again since, the handle's own exit (if it was kept) with ``newer_run``.

    HandleMismatch when the handle is for another address or namespace, or names a
    container of that name made after the handle's; NotFound when it is gone.
    """
    if handle.namespace != client.namespace:
        raise HandleMismatch(
            f"handle is for namespace {handle.namespace}, executor uses {client.namespace}"
        )
    if not runs.same_address(handle.address, client.address):
        raise HandleMismatch(
            f"handle is for containerd at {handle.address}, executor uses {client.address}"
        )
    try:
        record = containers.get(client, handle.id)
    except NotFound as exc:
        raise NotFound(f"container {handle.id} of the handle no longer exists") from exc
    made = handle.container_created_at
    if made is not None and record.created_at is not None and made != record.created_at:
        raise HandleMismatch(
            f"container {handle.id} was removed and made again since the handle was made"
        )
    state = tasks.find(client, handle.id)
    match = runs.locate(handle.run, handle.pid, record.labels, state.pid if state else None)
    exits = with_oom(client, {handle.id: state.exit} if state and state.exit else {})
    info = build(record, state, exits.get(handle.id), addresses=addresses)
    if match.newer is None or match.run is None:
        return info
    old = match.run
    return attrs.evolve(
        info,
        status=Status.STOPPED,
        pid=old.pid or handle.pid,
        exit=old.exit,
        run=old.run or handle.run,
        started_at=old.started_at or handle.started_at,
        newer_run=match.newer,
    )


def stopped_exit(client: Client, state: tasks.ProcessState | None) -> ExitStatus | None:
    """The exit of a stopped task about to be deleted, with its OOM fact (which goes
    with the task's cgroup)."""
    if state is None or state.status is not Status.STOPPED or state.exit is None:
        return None
    return with_oom(client, {state.container_id: state.exit})[state.container_id]


def record_start(
    client: Client,
    record: containers.Container,
    *,
    pid: int,
    started_at: datetime,
    replaced_exit: ExitStatus | None,
) -> tuple[int, containers.Container]:
    """Number the run that just started and keep the exit of the one it replaced;
    its number and the updated record. One label update per start."""
    update = runs.start_labels(
        record.labels, pid=pid, started_at=started_at, replaced_exit=replaced_exit
    )
    updated = containers.update_labels(client, record.id, update)
    return int(update[lbl.RUN_ID] or 0), updated


def record_exit(client: Client, record: containers.Container, status: ExitStatus) -> None:
    """Keep the current run's exit when its task is deleted but no new run started
    (a start that failed after deleting it). Best effort: it is only a report."""
    now = runs.current(record.labels)
    if now is None:
        return
    with contextlib.suppress(CtrexecError):
        containers.update_labels(
            client,
            record.id,
            {lbl.RUN_PREVIOUS: runs.previous_label(attrs.evolve(now, exit=status))},
        )
