"""The test harness removes the dead shim sockets and empty runc dirs its run left."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrexec.testing import remove_dead_shim_state, shim_state


def _old(path: Path) -> Path:
    past = time.time() - 60
    os.utime(path, (past, past), follow_symlinks=False)
    return path


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """pytest's tmp_path can be longer than a unix socket path may be (108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="cxs-", dir="/tmp") as where:
        yield Path(where)


def test_only_new_dead_entries_go(short_dir: Path) -> None:
    sockets, runc = short_dir / "s", short_dir / "runc"
    sockets.mkdir()
    runc.mkdir()
    (sockets / "from-before").touch()
    _old(sockets / "from-before")
    before = shim_state(sockets, runc)
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(sockets / "live"))
    live.listen()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sockets / "dead"))
    dead.close()  # its file stays, as a SIGKILLed shim's does
    young = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    young.bind(str(sockets / "young"))  # bound a moment ago, not listening yet
    (runc / "empty").mkdir()
    (runc / "busy").mkdir()
    (runc / "busy" / "task").mkdir()
    for name in ("live", "dead"):
        _old(sockets / name)
    try:
        removed = remove_dead_shim_state(before, sockets=sockets, runc=runc)
    finally:
        live.close()
        young.close()
    assert removed == [runc / "empty", sockets / "dead"]
    assert {p.name for p in sockets.iterdir()} == {"from-before", "live", "young"}
    assert {p.name for p in runc.iterdir()} == {"busy"}
