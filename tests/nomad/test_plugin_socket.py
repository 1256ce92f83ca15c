"""The plugin's gRPC socket is the agent's (root's) alone: a process of another uid is
refused by the 0700 directory, and by the socket's 0600 without it. Anyone reaching
it could start privileged-enough tasks as the job author the plugin trusts.
docs/security.md, "Sockets"."""

from __future__ import annotations

from pathlib import Path

from _access import assert_roots_alone, loosened, nobody_connects, passable_dir
from _harness import PluginProcess


def test_plugin_socket_refuses_another_uid() -> None:
    with passable_dir() as tmp:
        p = PluginProcess({"TMPDIR": str(tmp)})
        try:
            sock = Path(p.address)
            assert sock.parent.parent == tmp
            assert_roots_alone(sock.parent, 0o700)
            assert_roots_alone(sock, 0o600)
            assert nobody_connects(sock) == "EACCES"  # the directory
            with loosened(sock.parent):
                assert nobody_connects(sock) == "EACCES"  # the socket's own mode
            assert p.ping()  # root: served
        finally:
            assert p.shutdown_and_wait() == 0
