"""What is done to a task from the host, without an exec in it: files copied in and
out, its processes listed, its network counters read.

docker does these from the host too, so the image needs no ``tar`` or ``ps``. The work
is in :mod:`ctrexec.tasks.copying` (loaded with the Executor anyway: volumes' copy-up
uses it) and :mod:`ctrexec.tasks.procs` (loaded on first use: only ``top`` and
``stats`` read /proc).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from ctrexec.containerd import tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import FailedPrecondition
from ctrexec.tasks import copying

if TYPE_CHECKING:
    from ctrexec.containerd.images import ImageCache
    from ctrexec.paths import StrPath
    from ctrexec.tasks.procs import Proc as TaskProcess

_LIVE = (Status.RUNNING, Status.PAUSED)


class HostSide:
    """The Executor's verbs on a task from the host: copies in and out, its processes,
    its network counters (:class:`~ctrexec.Executor` inherits them)."""

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
