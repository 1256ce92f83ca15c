"""Waiting on a task that has no run yet: docker's ``wait`` of a created container.

docker's ``wait`` of a container never started blocks until a ``start`` from elsewhere
runs it and it exits, and answers at once for one whose run ended (its kept exit,
also when the task itself was deleted since). :meth:`Executor.wait` comes here when
containerd has no task to wait on, so a scheduler and the CLI get the same answer.

Waiting for a start is asked for (``until_started``), not assumed: a container whose
shim was killed has no task and no kept exit either (containerd forgets the task), and
nothing in its record tells it from one never started. A scheduler's wait on such a
run must end (NotFound), not wait for a start that may never come.

A start numbers its run in the record's labels before it deletes the previous task and
makes the new one (:func:`ctrexec.tasks.runs.next_run`), so a wait can arrive in between:
a run with no task and no exit yet. A run numbered less than :data:`STARTING_FOR`
seconds ago is taken for such a start, and the wait waits for it (the supervisor's
restarts meet this); an older one is a run whose task is gone (NotFound).

The event stream is subscribed before the state is read, so a start in between is an
event that makes it look again; any event of the task does. A removal of a
never-started container is no task event: the state is also read again every
:data:`RECHECK` seconds, so the wait then ends with NotFound.
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, DeadlineExceeded, NotFound
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks import waiting
from ctrexec.tasks.events import TaskEvents
from ctrexec.tasks.reports import TaskInfo

#: How often a wait for a created container looks whether it is still there.
RECHECK = 1.0
#: How long after a run was numbered its missing task is taken for a start in progress.
STARTING_FOR = 30.0
#: States with a run to wait on: containerd's Wait answers for them.
_RUN = (Status.RUNNING, Status.PAUSED, Status.PAUSING, Status.STOPPED)


def wait(
    client: Client,
    task_id: str,
    timeout: float | None = None,
    *,
    state_dir: Path | None = None,
    until_started: bool = False,
) -> ExitStatus:
    """The exit of the task's current run, or (``until_started``) of its first run once
    one starts; DeadlineExceeded after ``timeout`` seconds, NotFound once the container
    is gone, or at once when it has no run to wait on and ``until_started`` is false."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stream: TaskEvents | None = None
    woke = threading.Event()
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            info = taskinfo.inspect(client, task_id, addresses=False, state_dir=state_dir)
            if info.status in _RUN:
                with contextlib.suppress(NotFound):  # no task (deleted): its kept exit, if any
                    return waiting.wait(client, task_id, left)
            if info.exit is not None:  # its run ended and the task went, the exit kept
                return info.exit
            if info.status in _RUN:
                continue  # it was running and went meanwhile: look again
            if not until_started and not _starting(info):
                raise NotFound(f"task {task_id} not found: no run to wait on")
            if stream is None:
                stream = TaskEvents.of(client, tasks=[task_id])
                # Its keeper is the stream: cancelled in the finally below, it ends.
                threading.Thread(target=_pump, args=(stream, woke), daemon=True).start()
                continue  # look again now that nothing can be missed
            if left is not None and left <= 0:
                raise DeadlineExceeded(f"{task_id} did not exit within {timeout:g}s")
            woke.wait(RECHECK if left is None else min(RECHECK, left))
            woke.clear()
    finally:
        if stream is not None:
            stream.cancel()


def _starting(info: TaskInfo) -> bool:
    """A run numbered by a start that has not made its task yet (see above)."""
    if info.run <= 0 or info.started_at is None or info.exit is not None:
        return False
    return (datetime.now(UTC) - info.started_at).total_seconds() < STARTING_FOR


def _pump(stream: TaskEvents, woke: threading.Event) -> None:
    """Set ``woke`` at each event of the stream, and once more when it ends."""
    try:
        for _ in stream:
            woke.set()
    except CtrexecError:
        pass  # cancelled, or broken: the waiter reads the state again either way
    finally:
        woke.set()
