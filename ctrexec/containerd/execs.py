"""Exec'd processes: run a command inside a running task and collect its output.

Output comes back through FIFOs that the shim opens for writing. Each FIFO is opened
here first, without blocking, together with a write end of our own: the shim's open
then never waits for us, and a reader never sees EOF before the shim has connected.
Readers select on their FIFO and on a stop pipe, so no thread is ever stuck in a read
when the process is killed or a background child keeps the pipe open.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import attrs

from ctrexec.containerd import tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Stdio
from ctrexec.errors import CtrexecError, DeadlineExceeded

#: Output beyond this is dropped (and counted) so a chatty exec cannot exhaust memory.
MAX_CAPTURE = 16 * 1024 * 1024
#: How long output may still arrive after the process exited: a background child that
#: inherited the pipe must not hold the caller for ever.
DRAIN_GRACE = 2.0
#: How long a killed exec may take to be reported as exited.
KILL_GRACE = 10.0


@attrs.frozen
class ExecResult:
    """The outcome of an exec'd process, with its captured output."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""


class _Reader(threading.Thread):
    """Drains one FIFO until every writer is gone or the stop pipe is written."""

    def __init__(self, path: Path, stop_fd: int) -> None:
        super().__init__(daemon=True)
        self.data = bytearray()
        self.dropped = 0
        self._stop_fd = stop_fd
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._hold: int | None = os.open(path, os.O_WRONLY | os.O_NONBLOCK)

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._stop_fd], [], [])
            if self._fd in ready and not self._drain_once():
                return
            if self._stop_fd in ready:
                while self._drain_once():
                    pass
                return

    def _drain_once(self) -> bool:
        """Read what is there; False at EOF or when nothing more is buffered now."""
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            return False
        room = MAX_CAPTURE - len(self.data)
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)
        return bool(chunk)

    def release(self) -> None:
        """Drop our own write end, so EOF comes once the process's ends are closed."""
        if self._hold is not None:
            os.close(self._hold)
            self._hold = None

    def close(self) -> None:
        self.release()
        os.close(self._fd)


class _Readers:
    """The stdout and stderr readers of one exec and the stop pipe they share."""

    def __init__(self, workdir: Path) -> None:
        self._stop_r, self._stop_w = os.pipe()
        self.items: list[_Reader] = []
        for name in ("stdout", "stderr"):
            os.mkfifo(workdir / name, 0o600)
            self.items.append(_Reader(workdir / name, self._stop_r))
        for r in self.items:
            r.start()

    def finish(self, grace: float) -> None:
        """Let output drain for at most ``grace`` seconds, then stop the readers."""
        for r in self.items:
            r.release()
        for r in self.items:
            r.join(timeout=grace)
        os.write(self._stop_w, b"x")
        for r in self.items:
            r.join()

    def close(self) -> None:
        for r in self.items:
            r.close()
        os.close(self._stop_r)
        os.close(self._stop_w)


def _wait_or_kill(
    client: Client, container_id: str, exec_id: str, pending: Any, timeout: float | None
) -> ExitStatus:
    """The exit status, or DeadlineExceeded once the process was killed at the deadline."""
    try:
        return tasks.collect(pending, timeout)
    except DeadlineExceeded:
        with contextlib.suppress(CtrexecError):
            tasks.kill(client, container_id, signal.SIGKILL, exec_id=exec_id)
        with contextlib.suppress(CtrexecError):
            tasks.collect(pending, KILL_GRACE)
        raise DeadlineExceeded(
            f"exec in {container_id} did not finish within {timeout:g}s and was killed"
        ) from None


def run_exec(
    client: Client,
    container_id: str,
    process_spec: dict[str, Any],
    *,
    timeout: float | None = None,
) -> ExecResult:
    """Exec ``process_spec`` in the task, wait for it, and return code and output.

    With ``timeout``, the process is killed at the deadline and DeadlineExceeded is
    raised then, not after its output streams close.
    """
    exec_id = f"exec-{secrets.token_hex(6)}"
    workdir = Path(tempfile.mkdtemp(prefix="ctrexec-exec-"))
    try:
        readers = _Readers(workdir)
        try:
            status = _run(
                client,
                container_id,
                exec_id,
                process_spec=process_spec,
                workdir=workdir,
                readers=readers,
                timeout=timeout,
            )
        finally:
            readers.close()
        out, err = readers.items
        return ExecResult(exit_code=status.code, stdout=bytes(out.data), stderr=bytes(err.data))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(
    client: Client,
    container_id: str,
    exec_id: str,
    *,
    process_spec: dict[str, Any],
    workdir: Path,
    readers: _Readers,
    timeout: float | None,
) -> ExitStatus:
    stdio = Stdio(stdout=str(workdir / "stdout"), stderr=str(workdir / "stderr"))
    registered = False
    try:
        tasks.exec_process(client, container_id, exec_id, process_spec, stdio)
        registered = True
        pending = tasks.arm_wait(client, container_id, exec_id)
        try:
            tasks.start(client, container_id, exec_id)
            return _wait_or_kill(client, container_id, exec_id, pending, timeout)
        finally:
            pending.cancel()
    finally:
        readers.finish(DRAIN_GRACE)
        if registered:
            with contextlib.suppress(CtrexecError):
                tasks.kill(client, container_id, signal.SIGKILL, exec_id=exec_id)
            tasks.delete_process(client, container_id, exec_id)
