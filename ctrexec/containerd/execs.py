"""Exec'd processes: run a command inside a running task, streamed or captured.

:func:`start_exec` gives a :class:`~ctrexec.containerd.streams.Process` whose stdio
this client streams; :func:`run_exec` is a use of it that captures the output and
returns it with the exit code; :func:`start_detached` starts one with no stdio and
leaves it running. Each exec has its own FIFO directory
(:mod:`ctrexec.containerd.fifos`), removed on every path: a failed start here, the
exit in the process's watcher, or :meth:`Process.close`.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import tempfile
from pathlib import Path
from typing import Any, Unpack

import attrs

from ctrexec.containerd import tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.fifos import ClientEnds, FifoPaths
from ctrexec.containerd.streams import Process, StreamOptions
from ctrexec.containerd.tasks import Stdio
from ctrexec.errors import CtrexecError, DeadlineExceeded

#: Output beyond this is dropped (and counted) so a chatty exec cannot exhaust memory.
MAX_CAPTURE = 16 * 1024 * 1024
#: How long a killed exec may take to be reported as exited.
KILL_GRACE = 10.0
#: Where exec FIFO directories are made (``ctrexec-exec-*``; tests audit it).
FIFO_ROOT = Path(tempfile.gettempdir())
FIFO_PREFIX = "ctrexec-exec-"


@attrs.frozen
class ExecResult:
    """The outcome of an exec'd process, with its captured output."""

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""


class _Capture:
    """A bounded buffer that a pump appends to."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.dropped = 0

    def __call__(self, chunk: bytes) -> None:
        room = MAX_CAPTURE - len(self.data)
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)


@attrs.frozen
class DetachedExec:
    """A process :func:`start_detached` started and left running: its exec id in the
    task (containerd's, for ``Tasks.Kill``/``DeleteProcess``) and its host pid."""

    exec_id: str
    pid: int


def start_detached(client: Client, container_id: str, process_spec: dict[str, Any]) -> DetachedExec:
    """Exec ``process_spec`` in the task with no stdio and return once it runs
    (docker's ``exec -d``): no FIFOs and no watcher here, so nothing of this client
    outlives the call.

    Its stdio is the shim's null IO (``/dev/null``), as docker discards a detached
    exec's output. Its keeper is the task: it runs in the task's cgroup and PID
    namespace, so stopping or killing the task ends it, and the shim reaps it when it
    exits and keeps its exit status until the task is deleted (containerd's rule for
    exec processes no client deletes).
    """
    exec_id = f"exec-{secrets.token_hex(6)}"
    tasks.exec_process(client, container_id, exec_id, process_spec, Stdio())
    try:
        pid = tasks.start(client, container_id, exec_id)
    except BaseException:
        with contextlib.suppress(CtrexecError):
            tasks.delete_process(client, container_id, exec_id)
        raise
    return DetachedExec(exec_id=exec_id, pid=pid)


def start_exec(
    client: Client,
    container_id: str,
    process_spec: dict[str, Any],
    *,
    stdin: bool = False,
    size: tuple[int, int] | None = None,
    **streams: Unpack[StreamOptions],
) -> Process:
    """Exec ``process_spec`` in the task and stream its stdio.

    With ``process_spec["terminal"]`` the process gets a pseudo-terminal: stdout
    carries both streams, and ``size`` (columns, rows) is set before it runs.
    """
    tty = bool(process_spec.get("terminal"))
    if tty and size is not None:
        process_spec = {**process_spec, "consoleSize": {"width": size[0], "height": size[1]}}
    exec_id = f"exec-{secrets.token_hex(6)}"
    paths = FifoPaths.make(
        Path(tempfile.mkdtemp(prefix=FIFO_PREFIX, dir=FIFO_ROOT)), stdin=stdin, stderr=not tty
    )
    ends: ClientEnds | None = None
    registered = False
    try:
        ends = ClientEnds(paths, hold=True)
        stdio = Stdio(stdin=paths.stdin, stdout=paths.stdout, stderr=paths.stderr, terminal=tty)
        tasks.exec_process(client, container_id, exec_id, process_spec, stdio)
        registered = True
        pending = tasks.arm_wait(client, container_id, exec_id)
        try:
            pid = tasks.start(client, container_id, exec_id)
        except BaseException:
            pending.cancel()
            raise
        proc = Process(
            client,
            container_id,
            exec_id,
            pid=pid,
            tty=tty,
            ends=ends,
            pending=pending,
            owned_fifos=paths,
            **streams,
        )
    except BaseException:
        if ends is not None:
            ends.close()
        if registered:
            with contextlib.suppress(CtrexecError):
                tasks.delete_process(client, container_id, exec_id)
        paths.remove()
        raise
    if tty and size is not None:
        proc.resize(*size)
    return proc


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
    out, err = _Capture(), _Capture()
    with start_exec(client, container_id, process_spec, on_stdout=out, on_stderr=err) as proc:
        try:
            status = proc.wait(timeout)
        except DeadlineExceeded:
            with contextlib.suppress(CtrexecError):
                proc.kill(signal.SIGKILL)
            with contextlib.suppress(CtrexecError):
                proc.wait(KILL_GRACE)
            raise DeadlineExceeded(
                f"exec in {container_id} did not finish within {timeout:g}s and was killed"
            ) from None
        except BaseException:  # interrupted: do not leave the command running
            with contextlib.suppress(CtrexecError):
                proc.kill(signal.SIGKILL)
            raise
    return ExecResult(exit_code=status.exit_code, stdout=bytes(out.data), stderr=bytes(err.data))
