"""A command runs once: a real server and a real client over a real socket, with the
server killed, or failing, just after it forked the command's child (the window in
which, before, the child ran the command and the client, seeing its connection end
with no ACCEPTED, ran it too). Neither needs root or containerd: the server's child
runs a stand-in command that writes its pid to a file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _procs import gone

from ctrexec.cli import client
from ctrexec.testing import wait_for

#: A server on the directory argv[1] whose fork answers by ``FAULT`` (argv[2]) in the
#: parent, at once: "die" (as if killed) or "raise" (an OSError from pidfd_open).
#: The command is a stand-in that appends "child PID" to argv[3].
SERVER = textwrap.dedent(
    """
    import os, selectors, sys
    from ctrexec.cli import client as wire, server

    directory, fault, ran = sys.argv[1:4]
    paths = wire.socket_paths(directory)
    state = server._State(None, server._take_lock(paths[1]), paths, {})
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            with open(os.path.join(directory, "child"), "w") as f:
                f.write(str(pid))
        return pid

    def pidfd_open(pid, flags=0):
        if fault == "die":
            os._exit(9)
        raise OSError(24, "injected")

    def command():
        with open(ran, "a") as f:
            f.write(f"child {os.getpid()}\\n")
        os._exit(0)

    os.fork, os.pidfd_open, server._run_command = fork, pidfd_open, command
    state.listener = server._bind(paths)
    state.selector.register(state.listener, selectors.EVENT_READ)
    server._serve(state, 120.0)
    """
)
#: The client's conversation; the command run here appends "client PID" to argv[1].
CLIENT = textwrap.dedent(
    """
    import os, sys
    from ctrexec.cli import client

    ran = sys.argv[1]
    sys.argv = ["ctrexec", "version"]
    code = client._through_server()
    if code is None:
        with open(ran, "a") as f:
            f.write(f"client {os.getpid()}\\n")
        code = 0
    sys.exit(code)
    """
)


@pytest.mark.parametrize("fault", ["die", "raise"])
def test_a_server_lost_after_the_fork_runs_the_command_once(tmp_path: Path, fault: str) -> None:
    ran = tmp_path / "ran"
    env = {**os.environ, "CTREXEC_SERVER_DIR": str(tmp_path)}
    sock = Path(client.socket_paths(str(tmp_path))[0])
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(tmp_path), fault, str(ran)],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(sock.exists, timeout=60, what="the server to listen")
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, str(ran)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        child = int((tmp_path / "child").read_text())
        wait_for(lambda: gone(child), timeout=60, what="the forked child to end")
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=60)
    runs = ran.read_text().split()
    assert runs[0::2] == ["client"], runs  # once, by the client told (by EOF) to run it
