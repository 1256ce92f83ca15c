"""Pause, resume, signal and stop a task, refused in the user's words when its state forbids it.

runc answers a pause of a paused container with ``cannot pause a paused container:
unknown``, and containerd a signal to a stopped task with nothing at all. A user who
typed ``pause web`` wants to read ``container web is already paused``, so on a failure
the task's state is read and the refusal is rebuilt from it (docker's sentences), with
the RPC's own error chained. The happy path costs no extra call, except ``signal``,
which must look first: containerd would accept it for a task that already exited.
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from ctrexec import defaults
from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, DeadlineExceeded, FailedPrecondition
from ctrexec.tasks import copying  # loaded anyway with the Executor (volumes' copy-up)
from ctrexec.tasks import spec as taskspec

if TYPE_CHECKING:
    from ctrexec.containerd.images import ImageCache
    from ctrexec.paths import StrPath
    from ctrexec.tasks.procs import Proc as TaskProcess

_LIVE = (Status.RUNNING, Status.PAUSED)
#: How long a SIGKILLed task may take to be reported gone: the kernel's teardown of a
#: large cgroup is not instant, but it never waits for the task's own code.
KILL_WAIT = 10.0
#: runc's words when the cgroup freezer did not settle and it thawed the task again.
FREEZE_GAVE_UP = "unable to freeze"
#: The pauses between tries of a freeze that gave up: about 3 s in all.
FREEZE_RETRIES = (0.1, 0.2, 0.4, 0.8, 1.6)


def pause(client: Client, task_id: str) -> None:
    """Freeze the task, trying again while the kernel's freezer gives up on a busy cgroup.

    cgroup v1's freezer can stay FREEZING while a process is mid-syscall on a loaded
    host; runc then thaws the cgroup again and answers ``unable to freeze`` (seen in
    CI). The task is left running, as before the call, so another try is safe, and a
    user who typed ``pause`` wants the pause, not the kernel's hiccup.
    """
    for delay in (*FREEZE_RETRIES, None):
        try:
            tasks.pause(client, task_id)
            return
        except CtrexecError as exc:
            status = _status(client, task_id)
            if status is Status.PAUSED:
                raise FailedPrecondition(f"container {task_id} is already paused") from exc
            if status not in _LIVE:
                raise FailedPrecondition(f"container {task_id} is not running") from exc
            if FREEZE_GAVE_UP not in str(exc):
                raise
            if delay is None:
                tries = len(FREEZE_RETRIES) + 1
                raise DeadlineExceeded(
                    f"container {task_id} could not be paused: its processes did not "
                    f"freeze ({tries} tries); it is still running"
                ) from exc
            time.sleep(delay)


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


def stop(
    client: Client, task_id: str, timeout: float | None, signal: int | str | None
) -> ExitStatus | None:
    """Send the stop signal, then SIGKILL when ``timeout`` passes; the exit (None
    without a task). The caller holds the task's lock.

    No fixed sleep: the armed Wait returns the moment the task exits. A task with a
    restart policy is marked stopped by the user first, also when it has already
    exited (docker's stop of a restarting container keeps it stopped): the supervisor
    reads the mark before its restart is due, and again once it has started one, so a
    restart that raced this stop is stopped in either order.
    """
    record = containers.get(client, task_id)
    if lbl.RESTART_POLICY in record.labels:
        mark = {lbl.STOPPED_BY_USER: "true", lbl.RESTART_PENDING: None, lbl.RESTART_DUE: None}
        containers.update_labels(client, task_id, mark)
    state = tasks.find(client, task_id)
    if state is None:
        return None
    if state.status is Status.STOPPED:
        return state.exit
    sig = taskspec.parse_signal(signal or record.labels.get(lbl.STOP_SIGNAL, "SIGTERM"))
    if timeout is None:
        timeout = float(record.labels.get(lbl.STOP_TIMEOUT, defaults.DEFAULT_STOP_TIMEOUT))
    if state.status is Status.PAUSED:
        tasks.resume(client, task_id)
    pending = tasks.arm_wait(client, task_id)
    try:
        tasks.kill(client, task_id, sig)
        with contextlib.suppress(DeadlineExceeded):
            return tasks.collect(pending, timeout)
        tasks.kill(client, task_id, signals.SIGKILL, all_processes=True)
        return tasks.collect(pending, KILL_WAIT)
    finally:
        pending.cancel()


def _status(client: Client, task_id: str) -> Status | None:
    """The task's status, None without a task; NotFound (docker's words) without a container."""
    state = tasks.find(client, task_id)
    if state is None:
        containers.get(client, task_id)
        return None
    return state.status


class HostSide:
    """What an :class:`~ctrexec.Executor` does to a task from the host, without an exec:
    files copied in and out, its processes, its network counters. A base class of the
    Executor, defined here because executor.py is at the module cap; the work is in
    :mod:`ctrexec.tasks.copying` and :mod:`ctrexec.tasks.procs` (loaded on first use:
    no other verb pays for it)."""

    client: Client
    images: ImageCache

    def copy_in(
        self, task_id: str, src: StrPath, dst: str, *, follow: bool = False,
        archive: bool = False, stdin: IO[bytes] | None = None,
    ) -> None:  # fmt: skip
        """``docker cp SRC TASK:DST``, for a running, stopped or created task; ``src``
        ``"-"`` reads a tar stream from ``stdin``. ``dst`` resolves inside the task's
        root. Files belong to its root user unless ``archive`` keeps the tar's owners;
        ``follow`` copies what a symlink ``src`` names."""
        copying.copy_in(self.client, self.images, task_id, os.fspath(src), dst,
                        follow=follow, archive=archive, stdin=stdin)  # fmt: skip

    def copy_out(
        self, task_id: str, src: str, dst: StrPath, *, follow: bool = False,
        stdout: IO[bytes] | None = None,
    ) -> None:  # fmt: skip
        """``docker cp TASK:SRC DST``; ``dst`` ``"-"`` writes a tar stream to ``stdout``.
        Files made on the host belong to the caller, as docker's do."""
        copying.copy_out(self.client, self.images, task_id, src, os.fspath(dst),
                         follow=follow, stdout=stdout)  # fmt: skip

    def _live_pid(self, task_id: str) -> int:
        state = tasks.find(self.client, task_id)
        if state is None or state.status not in _LIVE or state.pid <= 0:
            raise FailedPrecondition(f"container {task_id} is not running")
        return state.pid

    def processes(self, task_id: str) -> list[TaskProcess]:
        """The processes of a running task (its cgroup's, execs included), read from the
        host's /proc as docker's ``top`` reads them: the image needs no ``ps``. One that
        exits meanwhile is left out. FailedPrecondition unless running or paused."""
        from ctrexec.tasks import procs  # only ``top`` and ``stats`` read /proc

        return procs.of_task(self._live_pid(task_id))

    def top(self, task_id: str, ps_options: Sequence[str]) -> tuple[list[str], list[list[str]]]:
        """``docker top TASK OPTIONS``: the host's ``ps OPTIONS`` (titles, rows) cut to
        the task's processes; InvalidArgument for options ``ps`` refuses or without a
        PID column."""
        from ctrexec.tasks import procs  # only ``top`` and ``stats`` read /proc

        return procs.ps_table(self._live_pid(task_id), ps_options)

    def net_io(self, task_id: str) -> tuple[int, int] | None:
        """Bytes received and sent over the task's interfaces, loopback left out (docker
        ``stats``' NET I/O, which containerd's metrics lack); None without a running
        task. On the host's network they are the host's counters."""
        from ctrexec.tasks import procs  # only ``top`` and ``stats`` read /proc

        state = tasks.find(self.client, task_id)
        return None if state is None or state.pid <= 0 else procs.net_io(state.pid)
