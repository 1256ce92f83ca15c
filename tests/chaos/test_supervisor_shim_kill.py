"""Issue 36, item 1: a shim SIGKILLed under a running ``ctrexec supervise``.

containerd reports the exit of every task the shim served (code 137) and then has no
task for them: ``Tasks.Get`` says not found (1.6, 1.7, 2.1 alike while containerd keeps
running). The supervisor announced the restart and then dropped it, because a task
that is not there looked "started meanwhile". Now the restart happens: every member of
a group is back in the group's one namespace (the pin's, by inode) with its address,
and a ``run -d -p --restart always`` container with its own shim too.

The supervisor is the real process the CLI starts (``CTREXEC_NO_SERVER=1``, as the
systemd unit runs it), on the session's containerd; the kills are real SIGKILLs of the
shim, found as the parent of a task's pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _chaoslib import wait_for
from _integrity import SERVER, Bridged, _get, _task, free_port

from ctrexec import labels as lbl
from ctrexec.containerd import tasks
from ctrexec.containerd.tasks import Status

CLIENT = "while :; do wget -q -O /dev/null http://127.0.0.1:8080/; sleep 0.5; done"


@pytest.fixture
def supervisor(bridged: Bridged) -> Iterator[Path]:
    """``ctrexec supervise`` as a process of the test's own, in-process (no command
    server); yields its log file. Stopped by its pid (SIGTERM) after the test."""
    log = bridged.tmp / "supervise.log"
    env = dict(bridged.env, CTREXEC_NO_SERVER="1")
    with log.open("w") as out:
        proc = subprocess.Popen(bridged.cli("supervise"), env=env, stdout=out, stderr=out)
    try:
        live = f"watching namespace {bridged.namespace}"
        wait_for(lambda: live in log.read_text(), "the supervisor's stream", timeout=60)
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    print(log.read_text())  # shown when the test failed
    assert "Traceback" not in log.read_text(), log.read_text()


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _running(g: Bridged, container_id: str) -> int:
    state = tasks.find(g.client, container_id)
    return state.pid if state is not None and state.status is Status.RUNNING else 0


def _inode(path: str) -> int:
    return os.stat(path).st_ino


def _kill_shim_of(pid: int) -> int:
    shim = _ppid(pid)
    assert (
        Path(f"/proc/{shim}/cmdline")
        .read_bytes()
        .split(b"\0")[0]
        .endswith(b"containerd-shim-runc-v2")
    )
    os.kill(shim, signal.SIGKILL)
    return shim


def test_a_group_whose_shim_is_killed_comes_back_in_its_namespace(
    bridged: Bridged, supervisor: Path
) -> None:
    g = bridged
    g.file.write_text(
        f'name = "{g.name}"\nnetwork = "bridge"\nports = ["127.0.0.1:{g.host_port}:8080"]\n'
        + _task("srv", g.image, SERVER, "always")
        + _task("cli", g.image, CLIENT, "always")
    )
    g.up()
    g.wait_sound()
    before = g.member_pids()
    address = g.group_address()
    pin = _inode(g.pin)
    assert address is not None
    _kill_shim_of(before["srv"])

    def back() -> bool:
        pids = {t: _running(g, g.member(t)) for t in ("srv", "cli")}
        return all(pids[t] and pids[t] != before[t] for t in pids)

    wait_for(back, "every member running again after the shim's kill", timeout=120, interval=0.2)
    for task in ("srv", "cli"):
        pid = _running(g, g.member(task))
        assert pid, task
        assert _inode(f"/proc/{pid}/ns/net") == _inode(g.pin) == pin, task
    assert g.group_address() == address
    g.wait_sound()
    ps = g.run("group ps", g.name)
    assert ps.returncode == 0 and "Restarting" not in ps.stdout, ps
    g.down_clean()


def test_a_task_with_its_own_shim_killed_comes_back(bridged: Bridged, supervisor: Path) -> None:
    g = bridged
    name, port = f"{g.name}-solo", free_port()
    made = g.run(
        "run", "-d", "--name", name, "--restart", "always", "-p", f"127.0.0.1:{port}:8080",
        g.image, "sh", "-c", SERVER,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        wait_for(lambda: _get(port) == "ok", "the published port", timeout=60)
        pid = _running(g, name)
        state = tasks.find(g.client, name)
        assert state is not None
        from ctrexec.containerd import containers

        path = containers.get(g.client, name).labels[lbl.NETNS_PATH]
        pin = _inode(path)
        assert _inode(f"/proc/{pid}/ns/net") == pin
        _kill_shim_of(pid)
        wait_for(lambda: _running(g, name) not in (0, pid), "the task running again", timeout=120)
        again = _running(g, name)
        assert _inode(f"/proc/{again}/ns/net") == _inode(path) == pin
        wait_for(lambda: _get(port) == "ok", "the published port after the restart", timeout=60)
    finally:
        g.run("rm", "-f", name)
