"""FIFO sets: the stdin, stdout and stderr FIFOs a shim connects a process to.

containerd's own client (``cio``) works this way: the client makes a directory of
FIFOs, names them in Tasks.Create or Tasks.Exec, and opens its ends; the runc shim
opens them too and keeps *both* ends of each open for the process's life. That is
what lets a client come and go (attach, detach, attach again): with no client, the
process still has a reader and a writer, and output waits in the pipe (up to its
64 KiB, then the process blocks on write, as with ``ctr``).

Order matters, on Linux semantics alone:

- the shim opens stdout/stderr for writing *blocking*, so a reader must exist
  first: ours, opened before the RPC;
- a FIFO with no writer reads as end-of-file, so until the shim has connected we
  also hold a write end of our own ("hold"), dropped once Tasks.Start returned;
- our stdin end is first opened read-write (a FIFO opened O_RDWR never blocks and
  needs no peer), then swapped for a plain write end once the shim holds a reader.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path

import attrs

STDIN, STDOUT, STDERR = "stdin", "stdout", "stderr"


@attrs.frozen
class FifoPaths:
    """The FIFOs of one process; an empty path is a stream it does not have."""

    directory: Path
    stdin: str = ""
    stdout: str = ""
    stderr: str = ""

    @classmethod
    def make(cls, directory: Path, *, stdin: bool, stderr: bool) -> FifoPaths:
        """Create the directory (0700) and the FIFOs; existing ones are reused."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        names = [STDOUT] + ([STDIN] if stdin else []) + ([STDERR] if stderr else [])
        for name in names:
            with contextlib.suppress(FileExistsError):
                os.mkfifo(directory / name, 0o600)
        return cls.existing(directory, stdin=stdin, stderr=stderr)

    @classmethod
    def existing(cls, directory: Path, *, stdin: bool, stderr: bool) -> FifoPaths:
        return cls(
            directory=directory,
            stdin=str(directory / STDIN) if stdin else "",
            stdout=str(directory / STDOUT),
            stderr=str(directory / STDERR) if stderr else "",
        )

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _close(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


class ClientEnds:
    """This client's ends of a FIFO set.

    ``hold=True`` before the shim knows the FIFOs (a new process): our own extra ends
    keep the shim's blocking opens and the first reads from failing or ending early;
    :meth:`connected` drops them. ``hold=False`` to join FIFOs the shim already holds
    (attach): nothing blocks then, and a stdin the shim no longer reads is None.
    """

    def __init__(self, paths: FifoPaths, *, hold: bool) -> None:
        self.paths = paths
        self.stdout: int | None = None
        self.stderr: int | None = None
        self.stdin: int | None = None
        self._holds: list[int] = []
        self._stdin_hold: int | None = None
        try:
            self.stdout = self._reader(paths.stdout, hold)
            self.stderr = self._reader(paths.stderr, hold)
            if paths.stdin and hold:
                self._stdin_hold = os.open(paths.stdin, os.O_RDWR | os.O_NONBLOCK)
            elif paths.stdin:
                self.stdin = self._writer(paths.stdin)
        except BaseException:
            self.close()
            raise

    def _reader(self, path: str, hold: bool) -> int | None:
        if not path:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if hold:
            self._holds.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        return fd

    @staticmethod
    def _writer(path: str) -> int | None:
        """A blocking write end, or None when nothing reads the FIFO any more."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return None
            raise
        os.set_blocking(fd, True)
        return fd

    def connected(self) -> None:
        """The shim holds its ends now (Tasks.Start returned): drop ours."""
        if self._stdin_hold is not None:
            self.stdin = self._writer(self.paths.stdin)  # our hold is a reader: never ENXIO
            _close(self._stdin_hold)
            self._stdin_hold = None
        for fd in self._holds:
            _close(fd)
        self._holds.clear()

    def take(self) -> tuple[int | None, int | None, int | None]:
        """Hand (stdin, stdout, stderr) over to a new owner, who closes them."""
        self.connected()
        fds = (self.stdin, self.stdout, self.stderr)
        self.stdin = self.stdout = self.stderr = None
        return fds

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr, self._stdin_hold, *self._holds):
            _close(fd)
        self.stdin = self.stdout = self.stderr = self._stdin_hold = None
        self._holds.clear()
