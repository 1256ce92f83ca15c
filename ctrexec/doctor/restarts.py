"""Restarts nobody is making: a container marked "restart pending" that stays down.

The supervisor marks a restart pending (:data:`~ctrexec.labels.RESTART_PENDING`) with
the time it is due (:data:`~ctrexec.labels.RESTART_DUE`) before it waits, and takes the
mark back once the restart happened or was called off. So a mark on a container with
no live task means one of two things doctor can tell apart:

- no supervisor serves the namespace (none holds its presence lock: it was killed, or
  never started): nothing will restart it;
- a supervisor runs, but the restart is overdue by more than :data:`OVERDUE`: it is
  not progressing on it (a restart that keeps failing says why in
  :data:`~ctrexec.labels.RESTART_ERROR`, which the finding repeats).

``ps`` says ``Restarting`` for both; for the first, ``ps``, ``inspect`` and ``group ps``
also name the missing supervisor with the words and fix doctor gives, which
:mod:`ctrexec.tasks.supervised` owns. Findings only: gc removes nothing here.
"""

from __future__ import annotations

from datetime import datetime

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.tasks import Status
from ctrexec.doctor.containers import command
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.tasks.supervised import DETAIL, is_supervised, repair

KIND = "restart"
#: How long past its due time a restart may be under way before doctor calls it
#: stalled: a start (image mounts, a group's namespace made whole) takes seconds.
OVERDUE = 30.0


def _due(labels: dict[str, str]) -> datetime | None:
    try:
        value = labels.get(lbl.RESTART_DUE)
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def judge(
    scope: Scope, record: containers.Container, live: bool, supervised: bool
) -> Finding | None:
    """The finding for one record, or None (the module's rule)."""
    labels = dict(record.labels)
    if live or labels.get(lbl.RESTART_PENDING) != "true":
        return None
    due = _due(labels)
    failing = labels.get(lbl.RESTART_ERROR)
    why = f"; its last attempt failed: {failing}" if failing else ""
    if not supervised:
        what = DETAIL + why
        fix = repair(scope.namespace, record.id)
    elif due is not None and scope.now - due.timestamp() > OVERDUE:
        what = "a restart is overdue: the supervisor is not progressing on it" + why
        fix = f"{command(scope, 'start', record.id)}; and restart the supervisor"
    else:
        return None
    return Finding(kind=KIND, where=record.id, what=what, fix=fix, since=due, garbage=False)


def find(scope: Scope) -> list[Finding]:
    pending = [r for r in scope.records() if r.labels.get(lbl.RESTART_PENDING) == "true"]
    if not pending:
        return []
    states = tasks.states_of(scope.client, [r.id for r in pending])
    served = is_supervised(scope.client)
    found = []
    for record in pending:
        state = states.get(record.id)
        live = state is not None and state.status not in (Status.STOPPED, Status.CREATED)
        finding = judge(scope, record, live, served)
        if finding is not None:
            found.append(finding)
    return found


CHECK = Check(kind=KIND, find=find)
