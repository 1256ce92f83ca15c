"""ctrexec.logs.holders: which log daemon holds a FIFO open, read from /proc.

A recovery after a wiped state dir must not give a FIFO a second reader; these hold a
FIFO open in a real process named as the daemon is, and in one that is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import holders
from ctrexec.testing import wait_for

HOLD = "import os, sys; os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK); sys.stdin.read()"


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / ".stdout-0123abcd.fifo"
    os.mkfifo(path)
    return path


def _holding(fifo: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HOLD, str(fifo), *extra], stdin=subprocess.PIPE)


def _opens(pid: int, path: Path) -> bool:
    """Whether ``pid`` has ``path`` open; an fd closed while looking (the starting
    interpreter opens and closes its own) is not it."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == str(path):
                return True
        except FileNotFoundError:
            continue
    return False


def _end(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()  # its read of stdin ends, and so does it
    proc.wait(30)


@pytest.fixture
def daemonlike(fifo: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = _holding(fifo, logdaemon.NAME)
    try:
        yield proc
    finally:
        _end(proc)


def test_a_fifo_held_by_a_daemon_is_found(fifo: Path, daemonlike: object, tmp_path: Path) -> None:
    other = tmp_path / "other.fifo"
    os.mkfifo(other)
    wait_for(lambda: holders.held_by(logdaemon.NAME, [str(fifo)]), timeout=30, what="held")
    assert holders.held(logdaemon.NAME, [str(fifo), str(other)]) == {str(fifo)}
    assert holders.is_fifo(str(fifo)) and not holders.is_fifo(str(tmp_path))


def test_a_fifo_held_by_another_program_is_not_a_daemons(fifo: Path) -> None:
    proc = _holding(fifo)  # no daemon's name among its arguments
    try:
        wait_for(lambda: _opens(proc.pid, fifo), timeout=30, what="the FIFO open")
        assert holders.held(logdaemon.NAME, [str(fifo)]) == set()
    finally:
        _end(proc)
