"""What is wrong around a task that its state alone does not say: :class:`Problem`\\ s.

``ps`` says "Up 3 minutes" for a task whose group lost its namespace pin, since the
task runs; the next restart would then join another namespace than its siblings'.
Each check here turns such a fact into a :class:`~ctrexec.tasks.fields.Problem` on the
TaskInfo: what it is, the facts, and the command that repairs it. Checks are cheap
(stat calls: no netlink, no CNI), so ``ps`` runs them on every listing; a new check
("not attached", "address conflict", "missing member") joins :func:`annotate`.

The group's running members come from the GROUP label and containerd's task pids
(:func:`members`); :mod:`ctrexec.tasks.groupnet` repairs what is found here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError
from ctrexec.tasks.fields import Problem
from ctrexec.tasks.reports import TaskInfo

if TYPE_CHECKING:
    from ctrexec.net import grouppin

_LIVE = (Status.RUNNING, Status.PAUSED, Status.PAUSING)
PIN_LOST = "namespace pin lost"
SPLIT = "namespace split"
NOT_ATTACHED = "not attached"


def pin_of(labels: Mapping[str, str]) -> str | None:
    """The group namespace's pin a record names; None for a task outside a group's
    namespace (host, none, or a namespace path of the user's own)."""
    group, path = labels.get(lbl.GROUP), labels.get(lbl.NETNS_PATH)
    if not group or not path or labels.get(lbl.NETNS_MODE, "path") != "path":
        return None
    # start-up: the namespace names load for a group member only, so ``ps`` of tasks
    # outside groups loads no net/ module
    from ctrexec.net import groupns

    return path if path == groupns.netns_path(group) else None


def settings_text(labels: Mapping[str, str]) -> str | None:
    """The network settings a member's namespace was wired with, if its record says."""
    return labels.get(lbl.NETWORK_SETTINGS) or labels.get(lbl.IMPLICIT_GROUP) or None


def wired_mode(labels: Mapping[str, str]) -> str | None:
    """The CNI mode (``bridge``, ``cni:NAME``) of a member whose record says how its
    group's namespace was wired; None for none, host, or a record too old to say."""
    mode = labels.get(lbl.NETWORK_MODE, "bridge")
    if pin_of(labels) is None or settings_text(labels) is None or mode in ("none", "host"):
        return None
    return mode


def live_pids(
    records: Sequence[containers.Container], states: Mapping[str, tasks.ProcessState]
) -> dict[str, int]:
    """The pids of the records whose task runs (or is paused), by id."""
    return {
        r.id: s.pid
        for r in records
        if (s := states.get(r.id)) is not None and s.status in _LIVE and s.pid > 0
    }


def members(client: Client, group: str) -> tuple[list[containers.Container], dict[str, int]]:
    """The group's records in its namespace and the pids of those whose task runs (a
    ``--group`` task in a namespace of its own shares the shim only)."""
    records = containers.list_containers(client, containers.label_filter(lbl.GROUP, group))
    records = [r for r in records if pin_of(r.labels) is not None]
    states = tasks.states_of(client, [r.id for r in records])
    return records, live_pids(records, states)


def pin_problems(found: grouppin.PinCheck, name: str) -> tuple[Problem, ...]:
    """The pin's problems, as the member ``name`` reports them (with the repair)."""
    if found.split:
        return (Problem(SPLIT, found.describe_split(), split_repair(found)),)
    if found.lost and found.members:
        detail = f"{found.pin} is gone; the tasks run on in the namespace"
        return (Problem(PIN_LOST, detail, f"run ctrexec start {name} to pin it again"),)
    return ()


def split_repair(found: grouppin.PinCheck) -> str:
    """The one safe repair of a split, for ``ps``, ``inspect``, ``group ps`` and doctor.

    Every running member in one namespace and the pin holding another (a stranger put
    at a lost pin): the stranger's pin goes and a start pins the members' namespace
    again. Restarting a member instead would move it, and then the group, into the
    stranger's namespace. Members in two namespaces with the pin on one of them: those
    outside restart into the pinned one; with the pin lost, no namespace is chosen.
    """
    if found.lost:
        return "run ctrexec group down, then group up again"
    if len(found.namespaces) == 1:
        first = sorted(found.members)[0]
        name = found.pin.rsplit("/", 1)[-1]
        return f"run ip netns del {name}, then ctrexec start {first} to pin theirs again"
    ids = " ".join(sorted(m for m, ns in found.members.items() if ns != found.pinned))
    return f"run ctrexec stop {ids}, then ctrexec start {ids}"


def annotate(
    infos: Sequence[TaskInfo],
    pids: Mapping[str, Mapping[str, int]] | None = None,
    stat_id: Callable[[str], grouppin.NsId | None] | None = None,
) -> list[TaskInfo]:
    """The infos with their problems. ``pids``: each group's running members, when
    ``infos`` are not all of them (inspect of one); else read from the infos.
    ``stat_id``: how a namespace file is identified (:func:`grouppin.ns_id`)."""
    groups: dict[str, dict[str, int]] = {}
    for info in infos:
        if info.group and info.status in _LIVE and info.pid > 0 and pin_of(info.labels):
            groups.setdefault(info.group, {})[info.id] = info.pid
    if pids is not None:
        groups.update({g: dict(p) for g, p in pids.items()})
    checks: dict[str, grouppin.PinCheck] = {}
    out = []
    for info in infos:
        pin = pin_of(info.labels)
        if pin is None or info.group is None:
            out.append(info)
            continue
        if info.group not in checks:
            # start-up: the pin check loads with the first group member listed
            from ctrexec.net import grouppin

            members_pids = groups.get(info.group, {})
            checks[info.group] = grouppin.check(pin, members_pids, stat_id or grouppin.ns_id)
        found = pin_problems(checks[info.group], info.id)
        out.append(attrs.evolve(info, problems=(*info.problems, *found)) if found else info)
    return out


def attachment_problems(infos: Sequence[TaskInfo]) -> list[TaskInfo]:
    """The infos, a running member's with "not attached" when its group's eth0, veth or
    bridge is gone. Through netlink and the CNI cache, so for ``inspect`` and ``group
    ps``, not ``ps``; a group whose pin is lost or split is left to that report."""
    seen: dict[str, tuple[Problem, ...]] = {}
    out = []
    for info in infos:
        mode = wired_mode(info.labels)
        pin = pin_of(info.labels)
        if mode is None or pin is None or info.group is None or info.status not in _LIVE:
            out.append(info)
            continue
        if any(p.what in (PIN_LOST, SPLIT) for p in info.problems):
            out.append(info)
            continue
        if info.group not in seen:
            seen[info.group] = _attachment(info, pin, mode)
        found = seen[info.group]
        out.append(attrs.evolve(info, problems=(*info.problems, *found)) if found else info)
    return out


def _attachment(info: TaskInfo, pin: str, mode: str) -> tuple[Problem, ...]:
    # Here, not at the top, for start-up cost: only a wired member's check loads CNI.
    from ctrexec.net import health as nethealth
    from ctrexec.net import settings

    text = settings_text(info.labels) or ""
    try:
        found = nethealth.faults(settings.from_label(text), str(info.group), pin, mode)
    except CtrexecError as exc:
        found = [f"cannot be checked: {exc}"]
    repair = f"run ctrexec start {info.id} to attach it again"
    return tuple(Problem(NOT_ATTACHED, fault, repair) for fault in found)
