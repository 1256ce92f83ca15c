"""What the executor says about a task: inspect, list, recover, and the run labels.

Kept apart from :mod:`ctrexec.tasks.executor`, which only delegates here: a scheduler's
questions (which run is this, how did it end, where can it be reached) read labels,
task state, cgroup counters and the namespace, and write nothing but the run labels
at each start (:func:`record_start`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers, stats, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, HandleMismatch, InvalidArgument, NotFound
from ctrexec.oci import mounts as ocimounts
from ctrexec.oci import process
from ctrexec.oci.mounts import Mount
from ctrexec.tasks import health, logkeeper, runs, supervised
from ctrexec.tasks.config import TaskConfig, config_of, listed_of
from ctrexec.tasks.reports import Deferred, TaskHandle, TaskInfo

if TYPE_CHECKING:
    from ctrexec.net.cni import PortMapping
    from ctrexec.net.nsinfo import Address
    from ctrexec.paths import StrPath

#: What ``list`` shows without ``all_tasks``: what runs, and what may (UNKNOWN).
_LISTED = (Status.RUNNING, Status.PAUSED, Status.PAUSING, Status.UNKNOWN)


def with_oom(client: Client, exits: Mapping[str, ExitStatus]) -> dict[str, ExitStatus]:
    """The exits with ``oom_killed`` set where the task's cgroup saw an OOM kill.

    containerd forgets OOM events, but a stopped task keeps its cgroup (and so the
    kernel's oom_kill counter) until it is deleted, which is exactly as long as its
    exit status lives: no supervisor is needed, and nothing is written. Only a
    SIGKILL exit can be an OOM kill, so others cost no Metrics call.
    """
    out = dict(exits)
    killed = [cid for cid, e in exits.items() if e.exit_code == tasks.SIGKILL_EXIT_CODE]
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
    published = [text for text in labels.get(lbl.GROUP_PORTS, "").split(",") if text]
    if not published:
        return ()
    # Here, for start-up cost: only a task that publishes ports loads the port parser.
    from ctrexec.net.ports import parse_port

    out = []
    for text in published:
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
    # start-up: netlink (pyroute2) loads only when a namespace is looked into
    from ctrexec.net import nsinfo

    try:
        found = nsinfo.inspect(path)
    except CtrexecError:
        if pid <= 0 or mode != "path":
            return None
        try:  # the pin lost (health says so): the task's own view of the namespace
            found = nsinfo.inspect(f"/proc/{pid}/ns/net")
        except CtrexecError:
            return None
    return tuple(a for a in found.addresses if a.ifname != "lo")


def _created(stamped: datetime | None, now: runs.Run | None) -> datetime | None:
    """When the container was made, as docker's ``Created``: never after its run began.
    containerd stamps the record as it stores it; a ``run`` writes the start time into
    that very create, read a few ms before the stamp, and a rename stores a new record.
    The container existed by the time it started, so the earlier of the two is true."""
    started = now.started_at if now else None
    if stamped is None or started is None:
        return stamped or started
    return min(stamped, started)


def build(
    record: containers.Container,
    state: tasks.ProcessState | None,
    last_exit: ExitStatus | None = None,
    *,
    addresses: bool = False,
) -> TaskInfo:
    """The latest run's info from the record and its task (``last_exit``: the task's
    exit with the OOM fact added). What only the config or the spec says is worked
    out when first read (:class:`Deferred`): ``ps`` prints ids, states and three
    fields of the config, and made every config and decoded every spec (issue 40)."""
    labels = record.labels
    now = runs.current(labels)
    exit_status = last_exit or (state.exit if state else None)
    status = state.status if state else Status.CREATED
    if state is None:
        # The run's task was deleted with its exit kept (a start that failed after
        # deleting it, a rename): it exited, as ps and docker's inspect say.
        exit_status = runs.kept_exit(labels)
        status = Status.STOPPED if exit_status is not None else Status.CREATED
    pid = state.pid if state else 0
    config = Deferred(lambda: config_of(record))
    facts = Deferred(lambda: _process_facts(record.spec))
    return TaskInfo(
        exit_reason=runs.exit_reason(labels) if state is None else None,
        unknown_reason=state.reason if state is not None and state.unknown else None,
        id=record.id,
        image=labels.get(lbl.IMAGE_REF, record.image),
        image_id=labels.get(lbl.IMAGE_ID, ""),
        status=status,
        pid=pid,
        exit=exit_status,
        netns_path=labels.get(lbl.NETNS_PATH),
        netns_mode=labels.get(lbl.NETNS_MODE, "none"),
        group=labels.get(lbl.GROUP),
        log_path=labels.get(lbl.LOG_PATH, ""),
        labels=labels,
        created_at=_created(record.created_at, now),
        config=config,
        run=now.run if now else 0,
        started_at=now.started_at if now else None,
        restart_count=_count(labels.get(lbl.RESTART_COUNT)),
        # A live task is not restarting, whatever a supervisor that died left behind.
        restarting=lbl.RESTART_PENDING in labels and status not in (Status.RUNNING, Status.PAUSED),
        restart_error=labels.get(lbl.RESTART_ERROR),
        ports=group_ports(labels),
        addresses=addresses_of(record, _live_pid(state)) if addresses else None,
        args=Deferred(lambda: facts.get().args),
        env=Deferred(lambda: facts.get().env),
        workdir=Deferred(lambda: facts.get().workdir),
        hostname=Deferred(lambda: facts.get().hostname),
        mounts=Deferred(lambda: _user_mounts(record.spec, config.get())),
        _listed=Deferred(lambda: listed_of(record)),
    )


def _user_mounts(spec: Mapping[str, Any], cfg: TaskConfig | None) -> tuple[Mount, ...]:
    """The spec's mounts at the destinations the config's ``-v`` and ``--mount`` name
    (not ctrexec's own: hosts files, the init): what docker's ``.Mounts`` lists."""
    wanted: set[str] = set()
    for parse, texts in ((ocimounts.parse_volume, cfg.volumes if cfg else ()),
                         (ocimounts.parse_mount, cfg.mounts if cfg else ())):  # fmt: skip
        for text in texts:
            with contextlib.suppress(InvalidArgument):  # a record made by another ctrexec
                wanted.add(parse(text).destination)
    found = spec.get("mounts")
    return tuple(
        Mount(
            str(m["destination"]),
            str(m.get("type") or ""),
            str(m.get("source") or ""),
            tuple(str(o) for o in m.get("options") or ()),
        )
        for m in (found if isinstance(found, list) else ())
        if isinstance(m, dict) and m.get("destination") in wanted
    )


@attrs.frozen
class _Facts:
    args: tuple[str, ...]
    env: tuple[str, ...]
    workdir: str
    hostname: str


def _process_facts(spec: Mapping[str, Any]) -> _Facts:
    """What the task runs with, as its spec says (a record made elsewhere may lack it)."""
    proc = spec.get("process")
    proc = proc if isinstance(proc, dict) else {}
    return _Facts(
        args=tuple(str(a) for a in _without_init(spec, proc.get("args") or [])),
        env=tuple(str(e) for e in proc.get("env") or ()),
        workdir=str(proc.get("cwd") or ""),
        hostname=str(spec.get("hostname") or ""),
    )


def _without_init(spec: Mapping[str, Any], args: list[Any]) -> list[Any]:
    """The task's own argv: docker's inspect leaves ``--init``'s out of it."""
    mounts = spec.get("mounts")
    inited = isinstance(mounts, list) and any(
        isinstance(m, dict) and m.get("destination") == process.INIT_PATH for m in mounts
    )
    return process.without_init(args) if inited else args


def _live_pid(state: tasks.ProcessState | None) -> int:
    """The pid while it is the task's: a stopped task's pid may be another process's."""
    live = state is not None and state.status in (Status.RUNNING, Status.PAUSED)
    return state.pid if live and state is not None else 0


def _count(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def inspect(
    client: Client, task_id: str, *, addresses: bool = True, state_dir: StrPath | None = None
) -> TaskInfo:
    """The container's latest run; ``state_dir``: an Executor's (its log daemon's place).

    Public as ``ctrexec.inspect_task``: :meth:`Executor.inspect` without an Executor, for
    a reader (a dashboard, the CLI's ``inspect`` and ``logs``) that starts nothing and so
    need not load what starting takes."""
    record, state = _read_together(client, task_id)
    exits = with_oom(client, {task_id: state.exit} if state and state.exit else {})
    info = build(record, state, exits.get(task_id), addresses=addresses)
    # Any command that inspects is one of the log daemon's keepers (tasks.logkeeper).
    info = logkeeper.annotate([info], logkeeper.revive(client, _path(state_dir)))[0]
    info = supervised.annotate(client, [info])[0]  # a restart no supervisor will make
    checked = _checked(client, info)
    # With its addresses (netlink already), its attachment too: eth0, veth, bridge.
    return health.attachment_problems([checked])[0] if addresses else checked


#: Reads of a record around its task before one pair is taken as it is: a start
#: changes the labels at most twice (run number, then restart count).
_READS = 4


def _read_together(
    client: Client, task_id: str
) -> tuple[containers.Container, tasks.ProcessState | None]:
    """The record and its task as of one moment. They are two reads, and a start
    (numbering its run in the labels, then deleting and making the task) can fall
    between them: the record of run 4 read with run 5's task not yet started made
    inspect say run 4 was never started. Every start changes the labels before its
    task, so a record that reads the same after the task read is that task's."""
    record = containers.get(client, task_id)
    for _ in range(_READS):
        state = tasks.find(client, task_id)
        again = containers.get(client, task_id)
        if again.labels == record.labels:
            break
        record = again
    return record, state


def _checked(client: Client, info: TaskInfo) -> TaskInfo:
    """The info with its problems: its group's running members are listed for them."""
    if info.group is None or health.pin_of(info.labels) is None:
        return info
    _, pids = health.members(client, info.group)
    return health.annotate([info], {info.group: pids})[0]


def list_infos(
    client: Client,
    *,
    all_tasks: bool = False,
    addresses: bool = False,
    state_dir: StrPath | None = None,
) -> list[TaskInfo]:
    """Every managed container's info, sorted by id; only running and paused ones
    unless ``all_tasks``. Public as ``ctrexec.list_tasks``: :meth:`Executor.list` for a
    reader with no Executor (``ps``), as :func:`inspect`. Three calls whatever the count,
    plus a Metrics call for SIGKILLed tasks and, if ``addresses``, a netlink dump per
    task. A record that List leaves out costs a Get (:func:`tasks.states_of`): a task
    whose shim does not answer is listed UNKNOWN, and without ``all_tasks`` too, for it
    may well run."""
    records = containers.list_containers(client, containers.label_filter(lbl.MANAGED, "true"))
    states = tasks.states_of(client, [r.id for r in records])
    if not all_tasks:
        records = [r for r in records if r.id in states and states[r.id].status in _LISTED]
    exits = with_oom(client, {r.id: s.exit for r in records if (s := states.get(r.id)) and s.exit})
    infos = [build(r, states.get(r.id), exits.get(r.id), addresses=addresses) for r in records]
    # Any command that lists is one of the log daemon's keepers (tasks.logkeeper).
    infos = logkeeper.annotate(infos, logkeeper.revive(client, _path(state_dir)))
    infos = supervised.annotate(client, infos)  # a restart no supervisor will make
    # Every running member is among the infos, so their group's pin can be checked.
    return sorted(health.annotate(infos), key=lambda i: i.id)


def _path(state_dir: StrPath | None) -> Path | None:
    return None if state_dir is None else Path(state_dir)


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
    # An UNKNOWN state has no pid: a handle from before runs were numbered is taken
    # for its run rather than called superseded by a pid nobody read.
    task_pid = (state.pid or (handle.pid if state.unknown else 0)) if state else None
    match = runs.locate(handle.run, handle.pid, record.labels, task_pid)
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
        # A pinned namespace is the old run's too; a ``none`` task's own is the new one's.
        addresses=info.addresses if info.netns_mode == "path" else None,
    )


def next_run(
    client: Client,
    record: containers.Container,
    state: tasks.ProcessState | None,
    clear: Sequence[str] = (),
) -> containers.Container:
    """Number the run about to start and keep the exit of the stopped task it
    replaces (with its OOM fact, which goes with the task's cgroup), in one label
    update before that task is deleted; also remove the ``clear`` labels."""
    stopped = state if state is not None and state.status is Status.STOPPED else None
    replaced = None
    if stopped is not None and stopped.exit is not None:
        replaced = with_oom(client, {record.id: stopped.exit})[record.id]
    update = dict.fromkeys(clear) | runs.next_run(
        record.labels,
        started_at=datetime.now(UTC),
        replaced_pid=stopped.pid if stopped else 0,
        replaced_exit=replaced,
    )
    return containers.update_labels(client, record.id, update)


def report_gone(
    client: Client,
    task_id: str,
    *,
    at: datetime,
    heard: ExitStatus | None = None,
    reason: str = runs.GONE_AT_RESTART,
) -> ExitStatus | None:
    """Keep the exit of a run whose task containerd deleted (while restarting, or with
    its dead shim): ``heard`` (an exit seen before), else
    :data:`~ctrexec.tasks.runs.LOST_EXIT_CODE` at ``at``, with the ``reason``. The exit
    the record keeps; None when the container or a task of it is there, or it never
    ran: then nothing went."""
    try:
        record = containers.get(client, task_id)
    except NotFound:
        return None
    if runs.current(record.labels) is None or tasks.find(client, task_id) is not None:
        return None
    kept = runs.kept_exit(record.labels)
    if kept is not None:
        return kept
    update = runs.lost_run(record.labels, at=at, reason=reason, heard=heard)
    return runs.kept_exit(containers.update_labels(client, task_id, update).labels)


def undo_next_run(client: Client, before: containers.Container) -> None:
    """A start that failed: the run number back as ``before`` had it. Best effort:
    the failure being reported matters more."""
    with contextlib.suppress(CtrexecError):
        containers.update_labels(client, before.id, runs.undo_next_run(before.labels))


def shim_shared(client: Client, group: str | None) -> bool:
    """Whether containers of this group remain, whose tasks its shared shim serves."""
    if not group:
        return False
    return bool(containers.list_containers(client, containers.label_filter(lbl.GROUP, group)))


def netns_users(path: str, infos: Sequence[TaskInfo]) -> list[str]:
    """What holds the namespace at ``path``, in a user's words: the live tasks of
    ``infos`` and every process or mount :func:`nsrefs.users_of` finds; a task whose
    processes were found is named once, under its container."""
    # start-up: the /proc walk's module loads for ``netns rm`` alone
    from ctrexec.net import nsrefs

    running = [i.id for i in infos if i.status in (Status.RUNNING, Status.PAUSED)]
    others = nsrefs.users_of(path)
    named = {u.container for u in others}
    return [*(f"container {t}" for t in running if t not in named), *map(str, others)]
