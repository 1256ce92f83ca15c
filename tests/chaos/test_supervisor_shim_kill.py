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

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _chaoslib import wait_for
from _integrity import SERVER, Bridged, _get, _task, free_port

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.tasks import Status

CLIENT = "while :; do wget -q -O /dev/null http://127.0.0.1:8080/; sleep 0.5; done"


class Supervise:
    """``ctrexec supervise`` as a process of the test's own, in-process (no command
    server, as the systemd unit runs it), its log in a file; ended by its pid."""

    def __init__(self, g: Bridged, log: Path) -> None:
        self.g, self.log = g, log
        self.proc = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        """A new supervisor process (the last one ended), once its stream is live."""
        env = dict(self.g.env, CTREXEC_NO_SERVER="1")
        live = f"watching namespace {self.g.namespace}"
        seen = self.log.read_text().count(live) if self.log.exists() else 0
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(self.g.cli("supervise"), env=env, stdout=out, stderr=out)
        wait_for(
            lambda: self.log.read_text().count(live) > seen, "the supervisor's stream", timeout=60
        )
        return self.proc

    def end(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def supervisor(bridged: Bridged) -> Iterator[Supervise]:
    """A supervisor for the test, ended after it (whatever the test did to it)."""
    sup = Supervise(bridged, bridged.tmp / "supervise.log")
    try:
        yield sup
    finally:
        sup.end()
        print(sup.log.read_text())  # shown when the test failed
    assert "Traceback" not in sup.log.read_text(), sup.log.read_text()


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
    bridged: Bridged, supervisor: Supervise
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


def test_a_task_with_its_own_shim_killed_comes_back(
    bridged: Bridged, supervisor: Supervise
) -> None:
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
        path = containers.get(g.client, name).labels[lbl.NETNS_PATH]
        pin = _inode(path)
        assert _inode(f"/proc/{pid}/ns/net") == pin
        address = g.eth0(pid)[0]
        assert len(address) == 1, address
        _kill_shim_of(pid)
        wait_for(lambda: _running(g, name) not in (0, pid), "the task running again", timeout=120)
        again = _running(g, name)
        assert _inode(f"/proc/{again}/ns/net") == _inode(path) == pin
        assert g.eth0(again)[0] == address
        wait_for(lambda: _get(port) == "ok", "the published port after the restart", timeout=60)
    finally:
        g.run("rm", "-f", name)


def _ps_status(g: Bridged, name: str) -> str:
    out = g.run("ps", "-a", "--filter", f"name={name}", "--format", "{{.Status}}")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _restart_findings(g: Bridged) -> list[dict[str, object]]:
    out = g.run("doctor", "--json")
    found: list[dict[str, object]] = json.loads(out.stdout or "[]")
    return [f for f in found if f["Kind"] == "restart"]


DELAY = 30


def test_a_pending_restart_is_shown_named_and_resumed_by_the_next_supervisor(
    bridged: Bridged, supervisor: Supervise
) -> None:
    """While due, ``ps`` says Restarting and ``inspect`` agrees; with the supervisor
    killed, doctor names the restart nobody makes; a supervisor started after it was
    due restarts at once (7a), not after the whole backoff again."""
    g = bridged
    always_later = f'[task.restart]\npolicy = "always"\ndelay = {DELAY}\n'
    g.file.write_text(
        f'name = "{g.name}"\nnetwork = "bridge"\nports = ["127.0.0.1:{g.host_port}:8080"]\n'
        + _task("srv", g.image, SERVER, None)
        + always_later
        + _task("cli", g.image, CLIENT, "always")
    )
    g.up()
    srv = g.member("srv")
    wait_for(lambda: _running(g, srv) and _running(g, g.member("cli")), "the group running")
    first, before_cli = _running(g, srv), _running(g, g.member("cli"))
    pin = _inode(g.pin)
    address = g.eth0(first)[0]
    _kill_shim_of(first)
    wait_for(
        lambda: re.fullmatch(r"Restarting \(137\) .*", _ps_status(g, srv)),
        f"ps to say {srv} is restarting",
        timeout=DELAY - 5,
        interval=0.2,
    )
    shown = json.loads(g.run("inspect", srv).stdout)[0]["State"]
    assert (shown["Status"], shown["Restarting"], shown["ExitCode"]) == ("restarting", True, 137)
    assert not _restart_findings(g)  # a supervisor runs and the restart is not yet due

    cli, cli_first = g.member("cli"), before_cli
    wait_for(lambda: _running(g, cli) not in (0, cli_first), "cli restarted", timeout=60)
    supervisor.end(signal.SIGKILL)  # as the OOM killer would: nothing takes the mark back
    found = _restart_findings(g)
    assert [f["Where"] for f in found] == [srv], found
    assert "no supervisor" in str(found[0]["What"]) and "start" in str(found[0]["Fix"])
    labels = containers.get(g.client, srv).labels
    due = datetime.fromisoformat(labels[lbl.RESTART_DUE])
    wait_for(lambda: datetime.now(UTC) > due, "the restart's due time", timeout=DELAY + 30)

    begun = datetime.now(UTC)
    supervisor.start()
    wait_for(lambda: _running(g, srv) not in (0, first), "srv running again", timeout=120)
    again = _running(g, srv)
    # The count and start time are written once the restarted task runs: after it.
    started = wait_for(
        lambda: containers.get(g.client, srv).labels.get(lbl.RESTART_STARTED_AT),
        "the restart counted",
        timeout=60,
    )
    restarted = datetime.fromisoformat(started)
    # Not a speed bound: without the due time kept, the new supervisor waits the whole
    # DELAY from its own start before it restarts.
    assert restarted < begun + timedelta(seconds=DELAY), (begun, restarted)
    assert _inode(f"/proc/{again}/ns/net") == _inode(g.pin) == pin
    assert g.eth0(again)[0] == address
    wait_for(lambda: not _restart_findings(g), "doctor to find no restart pending")
    assert _ps_status(g, srv).startswith("Up ")
