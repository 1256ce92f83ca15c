"""The CLI on a real pseudo-terminal, as a user at a terminal runs it.

The child makes the pty's slave its controlling terminal (setsid + TIOCSCTTY) before
it execs the CLI, so the kernel sends it SIGWINCH when the test resizes the pty, and
the test keeps the slave open to compare its termios attributes before and after.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Sequence

from _support import until

#: Runs in the child: become a session leader with the pty as controlling terminal.
_CTTY = (
    "import fcntl, os, sys, termios; os.setsid(); "
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"
)


class PtyCli:
    """One CLI process on its own pty; ``screen`` is everything it has shown."""

    def __init__(self, argv: Sequence[str], *, rows: int = 24, cols: int = 80) -> None:
        self.master, self.slave = os.openpty()
        self.resize(rows, cols)
        self.before = termios.tcgetattr(self.slave)
        self.screen = b""
        self._seen = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CTTY, *argv],
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            close_fds=True,
        )

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def attrs(self) -> list[object]:
        return termios.tcgetattr(self.slave)

    def write(self, data: bytes) -> None:
        os.write(self.master, data)

    def _pump(self) -> None:
        ready, _, _ = select.select([self.master], [], [], 0.1)
        if ready:
            with contextlib.suppress(OSError):  # EIO: no slave end is open any more
                self.screen += os.read(self.master, 65536)

    def expect(self, wanted: bytes, timeout: float = 30.0) -> bytes:
        """Wait (bounded) until ``wanted`` shows after what earlier expects consumed."""

        def seen() -> bool:
            self._pump()
            return wanted in self.screen[self._seen :]

        until(seen, f"{wanted!r} on the screen (so far {self.screen[-400:]!r})", timeout)
        self._seen = self.screen.index(wanted, self._seen) + len(wanted)
        return self.screen

    def wait(self, timeout: float = 30.0) -> int:
        def ended() -> bool:
            self._pump()
            return self.proc.poll() is not None

        until(ended, f"the CLI to exit (screen {self.screen[-400:]!r})", timeout)
        self._pump()
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        os.close(self.master)
        os.close(self.slave)
