"""Runs: which start of a container a task is, and what the run before it ended with.

A container is started many times (by hand, by the supervisor), and containerd keeps
only the current task: the exit of a run is gone once the next run's start deletes
it. A scheduler's handle must name one run, so that a recover after a restart can
say how *its* run ended and that a newer one exists. So each start numbers its run
in the record's labels, and copies the exit of the run it replaces into a label
before that exit is gone. Pure functions over labels; the executor does the I/O.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import HandleMismatch


@attrs.frozen(kw_only=True)
class Run:
    """One start of a container: its number, start time, and once it was replaced, its
    pid and exit (the current run's pid is its task's)."""

    run: int
    pid: int = 0
    started_at: datetime | None = None
    exit: ExitStatus | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "pid": self.pid,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "exit": self.exit.to_json() if self.exit else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        at = data.get("started_at")
        ended = data.get("exit")
        return cls(
            run=int(data["run"]),
            pid=int(data.get("pid") or 0),
            started_at=datetime.fromisoformat(at) if at else None,
            exit=ExitStatus.from_json(ended) if isinstance(ended, dict) else None,
        )


def _int(value: str | None) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def current(labels: Mapping[str, str]) -> Run | None:
    """The run the labels say is the latest; None for a record never started since
    runs were numbered (or never started at all)."""
    number = _int(labels.get(lbl.RUN_ID))
    if number <= 0:
        return None
    return Run(run=number, started_at=_time(labels.get(lbl.RUN_STARTED_AT)))


def previous(labels: Mapping[str, str]) -> Run | None:
    """The run before the current one, with its exit; None if none was kept (or the
    label does not parse: a lost fact is reported as unknown, never as an error)."""
    text = labels.get(lbl.RUN_PREVIOUS)
    if not text:
        return None
    try:
        data = json.loads(text)
        return Run.from_json(data) if isinstance(data, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def first_run(started_at: datetime) -> dict[str, str]:
    """The labels of a container's first run, which go into its Containers.Create."""
    return {lbl.RUN_ID: "1", lbl.RUN_STARTED_AT: started_at.isoformat()}


def next_run(
    labels: Mapping[str, str],
    *,
    started_at: datetime,
    replaced_pid: int,
    replaced_exit: ExitStatus | None,
) -> dict[str, str | None]:
    """The label update that numbers the next run, sent before its task is made.

    ``replaced_exit`` is the exit of the stopped task this start deletes (pid
    ``replaced_pid``), which belongs to the run the labels still name; it becomes
    :data:`~ctrexec.labels.RUN_PREVIOUS` before the task, and with it the exit, goes.
    Without one (no task: it was deleted before), the replaced run is kept with the
    exit recorded for it, if any, else as unknown.
    """
    old = current(labels)
    update: dict[str, str | None] = {
        lbl.RUN_ID: str((old.run if old else 0) + 1),
        lbl.RUN_STARTED_AT: started_at.isoformat(),
    }
    if lbl.EXIT_REASON in labels:  # said of the run this one replaces
        update[lbl.EXIT_REASON] = None
    kept = previous(labels)
    if old is not None and replaced_exit is None and kept is not None and kept.run == old.run:
        replaced_exit, replaced_pid = kept.exit, replaced_pid or kept.pid
    if old is not None or replaced_exit is not None:
        update[lbl.RUN_PREVIOUS] = previous_label(
            Run(
                run=old.run if old else 0,
                pid=replaced_pid,
                started_at=old.started_at if old else None,
                exit=replaced_exit,
            )
        )
    return update


def undo_next_run(labels: Mapping[str, str]) -> dict[str, str | None]:
    """Put the run number back as ``labels`` (before :func:`next_run`) had it, for a
    start that failed: no run began. The replaced run's exit stays kept, as the
    current run's (see :func:`kept_exit`)."""
    return {lbl.RUN_ID: labels.get(lbl.RUN_ID), lbl.RUN_STARTED_AT: labels.get(lbl.RUN_STARTED_AT)}


def kept_exit(labels: Mapping[str, str]) -> ExitStatus | None:
    """The current run's exit as kept in the labels, once its task was deleted with
    no run after it (a start that failed after deleting it)."""
    now, before = current(labels), previous(labels)
    same = before is not None and before.run == (now.run if now else 0)
    return before.exit if same and before is not None else None


#: The exit code a run is reported with when its task went with no exit seen (a
#: host's restart): docker's for a container whose process its daemon lost.
LOST_EXIT_CODE = 255


#: Why a run ended with no exit kept when containerd deleted its task as it started
#: again (1.7 and later reap a shim with no process left, task and exit with it).
GONE_AT_RESTART = "task deleted by containerd's restart"
#: Why, when its shim died: containerd (1.6, 1.7, 2.1) sends the exit (137) of every
#: task the shim served and deletes them at once, exit and all; the supervisor keeps
#: the exit it heard (see ``supervisor``).
GONE_WITH_SHIM = "task deleted with its dead shim"


def lost_run(
    labels: Mapping[str, str], *, at: datetime, reason: str, heard: ExitStatus | None = None
) -> dict[str, str]:
    """The label update that reports the current run exited when its task went with
    no exit kept, and why: with the exit ``heard`` before it went, else
    :data:`LOST_EXIT_CODE` at ``at``. The next start clears the reason (:func:`next_run`)."""
    now = current(labels)
    run = Run(
        run=now.run if now else 0,
        started_at=now.started_at if now else None,
        exit=heard or ExitStatus(exit_code=LOST_EXIT_CODE, exited_at=at),
    )
    return {lbl.RUN_PREVIOUS: previous_label(run), lbl.EXIT_REASON: reason}


def exit_reason(labels: Mapping[str, str]) -> str | None:
    """Why the current run ended, when :func:`lost_run` reported it (None otherwise)."""
    return labels.get(lbl.EXIT_REASON) if kept_exit(labels) is not None else None


def previous_label(run: Run) -> str:
    return json.dumps(run.to_json(), sort_keys=True, separators=(",", ":"))


def same_address(a: str, b: str) -> bool:
    """Whether two containerd addresses name one socket (``unix://`` and links aside)."""

    def norm(address: str) -> str:
        return os.path.realpath(address.removeprefix("unix://"))

    return norm(a) == norm(b)


@attrs.frozen(kw_only=True)
class Match:
    """Which run a handle names, as :func:`locate` found it.

    ``run`` is the handle's run as far as it is known (its exit None when it was not
    kept), and ``newer`` the latest run's number when the handle's was replaced.
    """

    run: Run | None
    newer: int | None


def locate(
    handle_run: int, handle_pid: int, labels: Mapping[str, str], task_pid: int | None
) -> Match:
    """Find the handle's run among the current one and the one kept before it.

    ``handle_run`` 0 is a handle from before runs were numbered: it is told apart by
    its pid alone. ``task_pid`` is the live task's pid, if there is a task.
    """
    now, before = current(labels), previous(labels)
    if now is None:
        # Never started since runs were numbered: the task, if any, is the handle's.
        return Match(run=None, newer=None)
    if handle_run == 0:
        if handle_pid == task_pid:
            return Match(run=None, newer=None)
        if before is not None and before.pid == handle_pid:
            return Match(run=before, newer=now.run)
        return Match(run=Run(run=0, pid=handle_pid), newer=now.run)
    if handle_run == now.run:
        return Match(run=None, newer=None)
    if handle_run > now.run:
        raise HandleMismatch(
            f"handle names run {handle_run}, but the container has had only {now.run}"
        )
    if before is not None and before.run == handle_run:
        return Match(run=before, newer=now.run)
    return Match(run=Run(run=handle_run, pid=handle_pid), newer=now.run)
