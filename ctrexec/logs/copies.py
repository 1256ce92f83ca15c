"""The log daemon's second destination: a copy of an interactive task's output for the
client attached to it, if any.

Why: a ``-t``/``-i`` task keeps a log as docker's do, so the daemon, not the attached
client, reads the FIFOs the shim writes (:mod:`ctrexec.logs.daemon`). A client reads
its own FIFO, the task's ``fifo/stdout`` (and ``fifo/stderr``), which this copy feeds.
The two ends meet as FIFO ends do (Linux ``fs/pipe.c``):

- the write end is opened ``O_WRONLY|O_NONBLOCK``, which fails (``ENXIO``) while no
  client reads: then the output is only logged, and the next chunk tries again. So a
  task with no client never waits for one;
- a client that went away (detach, a killed CLI) makes the next write fail with
  ``EPIPE``: the end is closed and the client's unread output dropped, as a
  terminal's is when it is closed;
- a client that reads slowly makes a write return ``EAGAIN``: the rest waits here and
  the daemon stops reading the task until the client took it, so the task is slowed
  as by a slow terminal, and nothing is lost or buffered without bound;
- at the end of the task's stream the write end is opened (if it was not) and closed,
  which a client reading the FIFO sees as its end of stream.

Standard library only: it runs in the daemon's process (see :mod:`ctrexec.logs.launcher`).
"""

# ruff: noqa: SIM105

from __future__ import annotations

import os
import stat


class Copy:
    """The write end of one client FIFO, open while a client reads it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        #: What a slow client has not taken yet (one read's worth at most).
        self.pending = b""

    def connect(self) -> bool:
        """Open the write end if a client reads the FIFO now; whether one is open."""
        if self.fd >= 0:
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:  # ENXIO: no client; ENOENT: the container is being removed
            return False
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)  # not ours to write: only a FIFO ctrexec made is fed
            return False
        self.fd = fd
        return True

    def send(self, data: bytes) -> bool:
        """Pass ``data`` on to the client, if one reads. False when it reads slowly:
        the rest is :attr:`pending`, and the task is not to be read until :meth:`flush`
        says True."""
        if not self.connect():
            return True
        self.pending += data
        return self.flush()

    def flush(self) -> bool:
        """Write what is pending; True once nothing is (or the client went away)."""
        while self.pending and self.fd >= 0:
            try:
                written = os.write(self.fd, self.pending)
            except BlockingIOError:
                return False
            except InterruptedError:
                continue
            except OSError:  # EPIPE: the client detached
                self.disconnect()
                break
            self.pending = self.pending[written:]
        self.pending = b"" if self.fd < 0 else self.pending
        return True

    def disconnect(self) -> None:
        """Close the write end, dropping what the client did not take."""
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1
        self.pending = b""

    def end(self) -> None:
        """The task's stream ended: a client reading the FIFO sees its end of stream."""
        if self.connect():
            self.flush()
        self.disconnect()
