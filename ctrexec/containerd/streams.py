"""A process whose stdio this client streams: an exec'd process, or an attached task.

Output is moved by one pump thread per stream, from our FIFO end to the caller: to a
callback, or into a pipe whose read end is the :class:`Process`'s ``stdout`` or
``stderr`` (a real file, so it can be selected on, and a caller that does not read
slows the process down rather than filling memory). A watcher thread waits for the
exit; then an exec'd process is deleted (the shim then closes its FIFO ends, which
ends our streams), the pumps get at most :data:`DRAIN_GRACE` more (a background child
may keep the pipe open for ever), and the exec's FIFO directory is removed.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, TypedDict, Unpack, cast

from ctrexec import _rpc
from ctrexec.containerd import tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.fifos import ClientEnds, FifoPaths
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import Canceled, CtrexecError, DeadlineExceeded

#: How long output may still arrive after the process exited.
DRAIN_GRACE = 2.0
READ_CHUNK = 65536

#: Receives each chunk of a stream's output, in a pump thread.
OutputCallback = Callable[[bytes], object]


class StreamOptions(TypedDict, total=False):
    """Where output goes: a callback per stream, else the Process's file of it."""

    on_stdout: OutputCallback | None
    on_stderr: OutputCallback | None


class _StreamPump(threading.Thread):
    """Moves one FIFO's data to a callback or a pipe until EOF or the stop pipe."""

    def __init__(self, fd: int, stop_fd: int, sink: OutputCallback | int) -> None:
        super().__init__(daemon=True)
        self._fd = fd
        self._stop_fd = stop_fd
        self._sink = sink

    def run(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._fd, self._stop_fd], [], [])
                if self._fd in ready and not self._move():
                    return
                if self._stop_fd in ready:
                    while self._move():
                        pass
                    return
        finally:
            os.close(self._fd)
            if isinstance(self._sink, int):
                with contextlib.suppress(OSError):
                    os.close(self._sink)

    def _move(self) -> bool:
        """Pass on what is buffered; False at EOF or when nothing is buffered now."""
        try:
            chunk = os.read(self._fd, READ_CHUNK)
        except BlockingIOError:
            return False
        if chunk:
            self._deliver(chunk)
        return bool(chunk)

    def _deliver(self, chunk: bytes) -> None:
        if callable(self._sink):
            self._sink(chunk)
            return
        if self._sink < 0:
            return  # the caller closed its stream: drain, so the process never blocks
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self._sink, view) :]
        except OSError:  # EPIPE: nobody reads the stream any more
            os.close(self._sink)
            self._sink = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Process:
    """A process whose stdin, stdout and stderr this client streams.

    ``stdin`` is a writable binary file when the process was given one (None after
    :meth:`close_stdin`); ``stdout`` and ``stderr`` are readable binary files unless a
    callback receives that stream (or, with a terminal, ``stderr`` is None: the
    terminal carries both). :meth:`wait` returns the exit once output has been
    delivered to the callbacks; a stream's EOF marks the end of its output.
    ``exit_fd`` turns readable then too, for select or an event loop. Use it as a
    context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        client: Client,
        container_id: str,
        exec_id: str,
        *,
        pid: int,
        tty: bool,
        ends: ClientEnds,
        pending: _rpc.Pending[Any],
        owned_fifos: FifoPaths | None = None,
        **streams: Unpack[StreamOptions],
    ) -> None:
        self.client = client
        self.task_id = container_id
        self.exec_id = exec_id
        self.pid = pid
        self.tty = tty
        self._pending = pending
        self._owned = owned_fifos
        self._lock = threading.Lock()
        self._closed = False
        self._watch_done = False
        self._released = False
        on_stdout, on_stderr = streams.get("on_stdout"), streams.get("on_stderr")
        self._callbacks = on_stdout is not None or on_stderr is not None
        self._status: ExitStatus | None = None
        self._error: CtrexecError | None = None
        self._exited = threading.Event()
        self._done = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        self._exit_r, self._exit_w = os.pipe()
        stdin_fd, stdout_fd, stderr_fd = ends.take()
        self.stdin: BinaryIO | None = self._file(stdin_fd, "wb")
        self.stdout: BinaryIO | None = None
        self.stderr: BinaryIO | None = None
        self._pumps: list[_StreamPump] = []
        for name, fd, callback in (
            ("stdout", stdout_fd, on_stdout),
            ("stderr", stderr_fd, on_stderr),
        ):
            if fd is not None:
                setattr(self, name, self._add_pump(fd, callback))
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    @staticmethod
    def _file(fd: int | None, mode: str) -> BinaryIO | None:
        return None if fd is None else cast(BinaryIO, os.fdopen(fd, mode, buffering=0))

    def _add_pump(self, fd: int, callback: OutputCallback | None) -> BinaryIO | None:
        if callback is not None:
            pump = _StreamPump(fd, self._stop_r, callback)
            stream = None
        else:
            read_end, write_end = os.pipe()
            pump = _StreamPump(fd, self._stop_r, write_end)
            stream = self._file(read_end, "rb")
        self._pumps.append(pump)
        pump.start()
        return stream

    @property
    def exit_fd(self) -> int:
        """Readable once :meth:`wait` would return without blocking."""
        return self._exit_r

    # -- the exit ------------------------------------------------------------------

    def _watch(self) -> None:
        try:
            self._status = tasks.collect(self._pending)
        except CtrexecError as exc:
            self._error = exc
        self._exited.set()
        if self.exec_id and self._status is not None:
            with contextlib.suppress(CtrexecError):  # it may have been deleted already
                tasks.delete_process(self.client, self.task_id, self.exec_id)
        for pump in self._pumps:
            pump.join(DRAIN_GRACE)
        self._signal(self._stop_w)
        if self._callbacks:
            for pump in self._pumps:
                pump.join()
        if self._owned is not None:
            self._owned.remove()
        self._done.set()
        self._signal(self._exit_w)
        with self._lock:
            self._watch_done = True
        if self._closed:
            for pump in self._pumps:
                pump.join(DRAIN_GRACE)
        self._release()

    def _release(self) -> None:
        """Close the control pipes once nothing can use them any more."""
        with self._lock:
            if self._released or not (self._closed and self._watch_done):
                return
            if any(p.is_alive() for p in self._pumps):
                return  # a callback that never returns: its pipe fds stay
            self._released = True
            for fd in (self._stop_r, self._stop_w, self._exit_r, self._exit_w):
                os.close(fd)

    def _signal(self, fd: int) -> None:
        with self._lock:
            if not self._closed:
                os.write(fd, b"x")

    def wait(self, timeout: float | None = None) -> ExitStatus:
        """The exit status; DeadlineExceeded if it has not come within ``timeout``."""
        if not self._done.wait(timeout):
            raise DeadlineExceeded(
                f"process {self.exec_id or self.task_id} in {self.task_id} "
                f"did not exit within {timeout:g}s"
            )
        if self._status is None:
            raise self._error or Canceled(f"stopped waiting for {self.task_id}")
        return self._status

    def poll(self) -> ExitStatus | None:
        """The exit status if the process has exited and its output is delivered."""
        return self._status if self._done.is_set() else None

    # -- acting on it --------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write all of ``data`` to stdin (blocking while the process does not read)."""
        if self.stdin is None:
            raise ValueError("the process has no stdin open")
        _write_all(self.stdin.fileno(), data)

    def close_stdin(self) -> None:
        """End the process's input: close our end, then the shim's (CloseIO)."""
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                self.stdin.close()
            self.stdin = None
        if not self._exited.is_set():
            with contextlib.suppress(CtrexecError):  # it may have exited meanwhile
                tasks.close_io(self.client, self.task_id, self.exec_id)

    def resize(self, width: int, height: int) -> None:
        """Set the size of the process's terminal (columns, rows)."""
        if self.tty and not self._exited.is_set():
            with contextlib.suppress(CtrexecError):
                tasks.resize_pty(self.client, self.task_id, width, height, exec_id=self.exec_id)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the process (the task's init process, when attached to a task)."""
        tasks.kill(self.client, self.task_id, int(sig), exec_id=self.exec_id)

    def close(self) -> None:
        """Stop streaming; the process itself is left running (a detach).

        An exec'd process that still runs is deleted by the watcher once it exits;
        its FIFO directory is removed now (the shim keeps its own open ends).
        """
        if self._closed:
            return
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.stdin = None
        if not self.exec_id:
            self._pending.cancel()
        self._signal(self._stop_w)
        for pump in self._pumps:
            pump.join(DRAIN_GRACE)
        if self._owned is not None:
            self._owned.remove()
        with self._lock:
            self._closed = True
        self._release()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
