"""Who can reach ctrexec's sockets and locks: root, and no process of another uid.

Each check has a child process of uid 65534 (tests/integration/_access.py) try for
real, first as the host is set up (the 0700 directory refuses it), then with the
directory opened up (the socket's or file's own mode, or the daemon's SO_PEERCRED
check, refuses it alone). docs/security.md, "Sockets".
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _access import assert_roots_alone, loosened, nobody_connects, nobody_opens, passable_dir

from ctrexec.containerd.client import Client
from ctrexec.groups import presence
from ctrexec.logs import client as logclient
from ctrexec.logs import daemon as logdaemon
from ctrexec.testing import TEST_ADDRESS_ENV, wait_for

REFUSED = "EACCES"
PING = json.dumps({"op": "ping"}) + "\n"


@pytest.fixture
def base() -> Iterator[Path]:
    with passable_dir() as where:
        yield where


def test_log_daemon_socket_refuses_another_uid(base: Path) -> None:
    where = base / "logd"
    logclient.spawn(where)
    sock = where / logdaemon.SOCKET
    pid = int((where / logdaemon.PIDFILE).read_text())
    try:
        assert_roots_alone(where, 0o700)
        assert_roots_alone(sock, 0o600)
        assert nobody_connects(sock) == REFUSED  # the directory
        with loosened(where):
            assert nobody_connects(sock) == REFUSED  # the socket's 0600
            sock.chmod(0o666)
            try:  # the kernel lets it in now; the daemon's SO_PEERCRED check does not
                assert nobody_connects(sock, PING) in ("closed", "ECONNRESET", "EPIPE")
            finally:
                sock.chmod(0o600)
        assert (
            logclient.request({"op": "ping"}, start=False, where=where)["pid"] == pid
        )  # root: served
    finally:
        os.kill(pid, signal.SIGTERM)  # the daemon this test started
        wait_for(lambda: not sock.exists(), timeout=30, what="the test's log daemon to exit")
    assert "refused a connection from uid 65534" in _daemon_log(where)


def _daemon_log(where: Path) -> str:
    """The daemon writes its own lines on the stderr it was started with: the client's
    spawn points it at a file in its state directory."""
    return "".join(p.read_text() for p in where.glob("*.log"))


def test_supervisor_lock_refuses_another_uid(client: Client, base: Path) -> None:
    lock_dir = base / "supervise"
    with presence.presence(client, lock_dir):
        (lock,) = lock_dir.iterdir()
        assert_roots_alone(lock_dir, 0o700)
        assert_roots_alone(lock, 0o600)
        assert nobody_opens(lock) == REFUSED
        with loosened(lock_dir):
            # could it open the lock, it could flock it and pose as a supervisor
            assert nobody_opens(lock) == REFUSED
        assert presence.is_supervised(client, lock_dir)


def test_embedded_containerd_socket_refuses_another_uid(containerd_address: str) -> None:
    if os.environ.get(TEST_ADDRESS_ENV):
        pytest.skip("the session's containerd is not ctrexec's embedded one")
    sock = Path(containerd_address)
    state = sock.parent
    assert_roots_alone(state, 0o700)
    st = sock.stat()
    assert st.st_uid == 0 and st.st_gid == 0 and not st.st_mode & 0o007, oct(st.st_mode)
    assert nobody_connects(sock) == REFUSED
    with loosened(state.parent, state):  # containerd's own 0660 root:root socket
        assert nobody_connects(sock) == REFUSED
