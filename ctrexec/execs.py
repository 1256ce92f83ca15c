"""Exec'd processes: run a command inside a running task and collect its output.

Output comes back through FIFOs that the shim opens for writing. A reader thread per
stream opens its FIFO (blocking until the shim does) and drains it; if the exec
fails before the shim ever opens a FIFO, we open the write end ourselves so the
reader sees EOF instead of hanging.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

from ctrexec import tasks
from ctrexec.client import Client
from ctrexec.taskconfig import ExecResult
from ctrexec.tasks import Stdio

#: Output beyond this is dropped (and counted) so a chatty exec cannot exhaust memory.
MAX_CAPTURE = 16 * 1024 * 1024


class _Reader(threading.Thread):
    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.data = bytearray()
        self.dropped = 0

    def run(self) -> None:
        with self.path.open("rb", buffering=0) as f:
            while chunk := f.read(65536):
                room = MAX_CAPTURE - len(self.data)
                self.data += chunk[:room]
                self.dropped += max(0, len(chunk) - room)

    def unblock(self) -> None:
        """Give a reader still waiting in open() its EOF."""
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)


def run_exec(
    client: Client,
    container_id: str,
    process_spec: dict[str, Any],
    *,
    timeout: float | None = None,
) -> ExecResult:
    """Exec ``process_spec`` in the task, wait for it, and return code and output."""
    exec_id = f"exec-{secrets.token_hex(6)}"
    workdir = Path(tempfile.mkdtemp(prefix="ctrexec-exec-"))
    readers = []
    try:
        for name in ("stdout", "stderr"):
            os.mkfifo(workdir / name, 0o600)
            readers.append(_Reader(workdir / name))
        for r in readers:
            r.start()
        stdio = Stdio(stdout=str(workdir / "stdout"), stderr=str(workdir / "stderr"))
        registered = False
        try:
            tasks.exec_process(client, container_id, exec_id, process_spec, stdio)
            registered = True
            pending = tasks.arm_wait(client, container_id, exec_id)
            try:
                tasks.start(client, container_id, exec_id)
                status = tasks.collect(pending, timeout)
            finally:
                pending.cancel()
        finally:
            for r in readers:
                r.unblock()
            for r in readers:
                r.join(timeout=30)
            if registered:
                with contextlib.suppress(Exception):
                    tasks.kill(client, container_id, signal.SIGKILL, exec_id=exec_id)
                tasks.delete_process(client, container_id, exec_id)
        return ExecResult(
            exit_code=status.code, stdout=bytes(readers[0].data), stderr=bytes(readers[1].data)
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
