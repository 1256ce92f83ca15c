"""Pause, resume and signal a task, refused in the user's words when its state forbids it.

runc answers a pause of a paused container with ``cannot pause a paused container:
unknown``, and containerd a signal to a stopped task with nothing at all. A user who
typed ``pause web`` wants to read ``container web is already paused``, so on a failure
the task's state is read and the refusal is rebuilt from it (docker's sentences), with
the RPC's own error chained. The happy path costs no extra call, except ``signal``,
which must look first: containerd would accept it for a task that already exited.
"""

from __future__ import annotations

from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError, FailedPrecondition

_LIVE = (Status.RUNNING, Status.PAUSED)


def pause(client: Client, task_id: str) -> None:
    try:
        tasks.pause(client, task_id)
    except CtrexecError as exc:
        status = _status(client, task_id)
        if status is Status.PAUSED:
            raise FailedPrecondition(f"container {task_id} is already paused") from exc
        if status not in _LIVE:
            raise FailedPrecondition(f"container {task_id} is not running") from exc
        raise


def resume(client: Client, task_id: str) -> None:
    try:
        tasks.resume(client, task_id)
    except CtrexecError as exc:
        if _status(client, task_id) is not Status.PAUSED:
            raise FailedPrecondition(f"container {task_id} is not paused") from exc
        raise


def signal(client: Client, task_id: str, signum: int) -> None:
    """Signal a live task; one that is created, exited or absent is an error, as in docker."""
    if _status(client, task_id) not in _LIVE:
        raise FailedPrecondition(f"container {task_id} is not running")
    tasks.kill(client, task_id, signum)  # an exit meanwhile is not an error


def _status(client: Client, task_id: str) -> Status | None:
    """The task's status, None without a task; NotFound (docker's words) without a container."""
    state = tasks.find(client, task_id)
    if state is None:
        containers.get(client, task_id)
        return None
    return state.status
