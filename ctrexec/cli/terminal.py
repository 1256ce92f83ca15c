"""The local side of ``-i``/``-t``/``attach``: raw mode, window size, detach keys, and
the loop that copies the local stdin to a :class:`ctrexec.Process`.

Only the standard library at module level: the parser imports this module.

Signals: the handlers do nothing; ``signal.set_wakeup_fd`` writes each signal's number
to a pipe the loop selects on (with the local stdin and the process's ``exit_fd``), so
no work and no lock ever runs inside a handler. With ``-t`` the terminal is in raw
mode (ctrl-c is a byte for the task); SIGTERM, SIGHUP and SIGINT from elsewhere end
the session, which restores the terminal on the way out, as every exit path does.
Without ``-t`` they are forwarded to the process, as docker's ``--sig-proxy`` does.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import termios
import tty
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ctrexec import CtrexecError, InvalidArgument, NotATerminal
from ctrexec.cli._common import signal_pipe

if TYPE_CHECKING:
    from ctrexec import Process

DEFAULT_DETACH_KEYS = "ctrl-p,ctrl-q"
#: docker's names for control characters: ``ctrl-@`` is 0, ``ctrl-a`` 1 ... ``ctrl-_`` 31.
_CTRL_NAMES = "@abcdefghijklmnopqrstuvwxyz[\\]^_"
_LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
READ_CHUNK = 4096


def parse_detach_keys(text: str) -> bytes:
    """docker's ``--detach-keys``: comma-separated ``ctrl-X``, ``DEL`` or one character.

    An empty value means docker's default, ``ctrl-p,ctrl-q``.
    """
    codes = bytearray()
    for key in (text or DEFAULT_DETACH_KEYS).split(","):
        if len(key) == 1 and ord(key) < 128:
            codes.append(ord(key))
        elif key.startswith("ctrl-") and len(key) == 6 and key[5] in _CTRL_NAMES:
            codes.append(_CTRL_NAMES.index(key[5]))
        elif key == "DEL":
            codes.append(127)
        else:
            raise InvalidArgument(f"invalid --detach-keys {text!r}: unknown character {key!r}")
    return bytes(codes)


class DetachScanner:
    """Finds the detach sequence in the input, holding back a partial match.

    Bytes that start the sequence wait until it completes (then the session ends and
    they are never sent) or breaks (then they go on, with the byte that broke it).
    """

    def __init__(self, keys: bytes) -> None:
        self._keys = keys
        self._held = 0

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """What to pass on, and whether the sequence is complete."""
        out = bytearray()
        for byte in data:
            if self._keys and byte == self._keys[self._held]:
                self._held += 1
                if self._held == len(self._keys):
                    self._held = 0
                    return bytes(out), True
                continue
            out += self._keys[: self._held]
            self._held = 0
            if self._keys and byte == self._keys[0]:
                self._held = 1
                continue
            out.append(byte)
        return bytes(out), False


def check_input(interactive: bool, tty_mode: bool) -> None:
    """docker's check: ``-it`` needs a terminal on stdin (docker exits 1 then)."""
    if interactive and tty_mode and not os.isatty(0):
        raise NotATerminal("the input device is not a TTY")


def window_size() -> tuple[int, int] | None:
    """(columns, rows) of the local terminal: stdout's, else stdin's."""
    for fd in (1, 0):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            return size.columns, size.lines
    return None


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal in raw mode for the block, its attributes restored however it ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def write_out(fd: int) -> Callable[[bytes], None]:
    """A callback that writes each chunk of output to ``fd`` whole."""

    def write(chunk: bytes) -> None:
        view = memoryview(chunk)
        with contextlib.suppress(OSError):  # the local terminal went away
            while view:
                view = view[os.write(fd, view) :]

    return write


class Session:
    """One attached client: copies stdin in, reacts to signals, ends at the exit.

    Entered *before* the process starts, so that a signal or a keystroke that comes
    while it starts is not lost and the terminal is raw before the first output;
    :meth:`run` then serves the process. ``close_stdin_on_eof``: a local EOF ends the
    process's input (``run -i``, ``exec -i``); ``attach`` leaves it open, as docker's.
    """

    def __init__(
        self, *, tty: bool, stdin: bool, detach_keys: bytes, close_stdin_on_eof: bool = True
    ) -> None:
        self.tty = tty
        self._scanner = DetachScanner(detach_keys if tty else b"")
        self._close_on_eof = close_stdin_on_eof
        self._stdin_open = stdin
        self._raw = tty and stdin and os.isatty(0)
        self._stack = contextlib.ExitStack()
        self._wake = -1
        self.proc: Process | None = None

    def __enter__(self) -> Session:
        signals = (*_LEAVE_SIGNALS, signal.SIGWINCH) if self.tty else _LEAVE_SIGNALS
        with contextlib.ExitStack() as stack:
            self._wake = stack.enter_context(signal_pipe(signals))
            if self._raw:
                stack.enter_context(raw_mode(0))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stack.close()

    def run(self, proc: Process) -> int | None:
        """The exit code; None after a detach; 128+N when signal N ended the session."""
        self.proc = proc
        self._stdin_open = self._stdin_open and proc.stdin is not None
        self._resize()
        return self._loop(self._wake)

    def _loop(self, wake: int) -> int | None:
        assert self.proc is not None
        while True:
            fds = [wake, self.proc.exit_fd] + ([0] if self._stdin_open else [])
            ready, _, _ = select.select(fds, [], [])
            if self.proc.exit_fd in ready:
                return self.proc.wait().exit_code
            if wake in ready:
                left = self._on_signals(os.read(wake, 64))
                if left is not None:
                    return left
            if 0 in ready and self._on_input():
                return None

    def _on_signals(self, numbers: bytes) -> int | None:
        assert self.proc is not None
        for num in numbers:
            if num == signal.SIGWINCH:
                self._resize()
            elif self.tty:
                return 128 + num
            else:
                with contextlib.suppress(CtrexecError):  # the process may be gone already
                    self.proc.kill(num)
        return None

    def _on_input(self) -> bool:
        """Pass the local input on; True when the detach keys were typed."""
        assert self.proc is not None
        data = os.read(0, READ_CHUNK)
        if not data:
            self._stdin_open = False
            if self._close_on_eof:
                self.proc.close_stdin()
            return False
        forward, detached = self._scanner.feed(data)
        if forward:
            try:
                self.proc.write(forward)
            except (OSError, ValueError):  # the process's stdin is closed
                self._stdin_open = False
        return detached

    def _resize(self) -> None:
        size = window_size() if self.tty else None
        if size is not None and self.proc is not None:
            self.proc.resize(*size)
