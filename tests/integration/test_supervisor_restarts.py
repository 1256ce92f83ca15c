"""Restarts as ``ctrexec supervise`` makes them, through the real process (issue 18):
a restart that fails is said, retried and shown, and ``stop`` of a task waiting for
its restart keeps it stopped.

The supervisor runs as its own process, as under systemd; ``ps`` and ``inspect``
are other processes that learn of a pending restart from the record's labels alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _nethelpers import RUN_TAG
from _support import scratch_executor, until

from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.presence import is_supervised
from ctrexec.net import netns
from ctrexec.tasks.config import RestartPolicy, TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.supervised import UNSERVED, repair

pytestmark = pytest.mark.integration


class Supervise:
    """``ctrexec supervise`` as a child process, its log lines gathered as they come."""

    def __init__(self, cli: Cli) -> None:
        self.proc = subprocess.Popen(cli.argv("supervise"), stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> list[str]:
        """The log lines that contain ``text``, the log's prefix cut off."""
        return [line[line.index(text) :] for line in list(self.lines) if text in line]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


@pytest.fixture
def ex(client: Client, tmp_path: Path) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "sr-") as executor:
        yield executor


@pytest.fixture
def supervise(cli: Cli, ex: Executor) -> Iterator[Supervise]:
    sup = Supervise(cli)
    try:
        until(lambda: is_supervised(ex.client), "the supervisor's presence lock")
        yield sup
    finally:
        code = sup.stop()
    assert code == 0, sup.lines
    assert not any("Traceback" in line for line in sup.lines), sup.lines


def _status(cli: Cli, name: str) -> str:
    out = cli("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}} {{.Status}}")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_restart_that_fails_is_logged_retried_and_shown(
    ex: Executor, supervise: Supervise, cli: Cli, test_image: str
) -> None:
    name, ns_name = "sr-netns", f"{RUN_TAG}sr"
    ns = netns.create(ns_name)
    try:
        ex.start_task(
            TaskConfig(
                name=name, image=test_image, command=("sleep", "1000"), netns=ns_name,
                restart=RestartPolicy(policy="always", delay=0.1),
            )
        )  # fmt: skip
        netns.remove(ns.path)  # the pin goes; the task alone keeps the namespace alive
        ex.signal(name, "SIGKILL")
        failed = f"restart of {name} failed: "
        until(lambda: len(supervise.said(failed)) >= 2, "two failed restarts logged", timeout=60)
        reason = f"network namespace {ns.path} does not exist"
        assert all(line.startswith(failed + reason) for line in supervise.said(failed))
        delays = [
            float(re.findall(r"retrying in ([0-9.]+)s", x)[0]) for x in supervise.said(failed)
        ]
        assert delays[:2] == [0.2, 0.4]  # on the backoff
        info = ex.inspect(name)
        assert (info.status, info.run, info.restart_count) == (Status.STOPPED, 1, 0)
        assert lbl.RESTART_COUNT not in info.labels  # no restart happened: none is counted
        assert info.restarting and info.restart_error == reason
        assert re.fullmatch(rf"{name} Restarting \(137\) .+ ago", _status(cli, name))
        shown = json.loads(cli("inspect", name, check=True).stdout)[0]
        assert (shown["State"]["Status"], shown["State"]["Error"]) == ("restarting", reason)
        assert (shown["Ctrexec"]["restarting"], shown["Ctrexec"]["restart_error"]) == (True, reason)
        formatted = cli("inspect", "-f", "{{.State.Restarting}} {{.State.Error}}", name)
        assert formatted.stdout == f"true {reason}\n", formatted.stderr

        netns.create(ns_name)  # back: the next retry succeeds
        until(lambda: ex.inspect(name).restart_count == 1, "the restart once it can", timeout=60)
        info = ex.inspect(name)
        assert (info.status, info.run) == (Status.RUNNING, 2)
        assert not info.restarting and info.restart_error is None
        assert lbl.RESTART_PENDING not in info.labels
        assert _status(cli, name).startswith(f"{name} Up ")
        assert supervise.said(f"restarted {name} (attempt 1)")
    finally:
        ex.destroy(name, force=True)
        if Path(ns.path).exists():
            netns.remove(ns.path)


def test_stop_of_a_task_waiting_to_restart_keeps_it_stopped(
    ex: Executor, supervise: Supervise, cli: Cli, test_image: str
) -> None:
    name = "sr-stop"
    ex.start_task(
        TaskConfig(
            name=name, image=test_image, command=("sh", "-c", "exit 1"),
            restart=RestartPolicy(policy="always", delay=12),
        )
    )  # fmt: skip
    until(lambda: ex.inspect(name).restarting, "the restart to be scheduled", timeout=60)
    assert re.fullmatch(rf"{name} Restarting \(1\) .+ ago", _status(cli, name))
    out = cli("stop", name)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{name}\n", "")
    info = ex.inspect(name)  # the stop has returned: what it wrote is there
    assert not info.restarting and info.labels.get(lbl.STOPPED_BY_USER) == "true"
    assert re.fullmatch(rf"{name} Exited \(1\) .+ ago", _status(cli, name))
    called_off = f"{name} was stopped by hand; not restarting it"
    until(lambda: supervise.said(called_off), "the supervisor's timer to call it off", timeout=60)
    info = ex.inspect(name)
    assert (info.status, info.run, info.restart_count) == (Status.STOPPED, 1, 0)
    assert not supervise.said(f"restarted {name}")
    # A start by hand forgets the stop, as docker's does: the policy applies again.
    assert cli("start", name).returncode == 0
    until(lambda: ex.inspect(name).restarting, "the next restart to be scheduled", timeout=60)
    assert lbl.STOPPED_BY_USER not in ex.inspect(name).labels


def test_a_restart_no_supervisor_serves_is_named_until_one_does(
    ex: Executor, cli: Cli, test_image: str, tmp_path: Path
) -> None:
    """Issue 36: a supervisor SIGKILLed while a restart waits leaves it pending with
    nobody to make it. ``ps``, ``inspect`` and ``group ps`` name the missing supervisor
    and the fix doctor gives (one answer); a new supervisor makes the restart, and the
    words go."""
    group = "sr-unsv"
    name = f"{group}-t"
    spec = tmp_path / "group.toml"
    spec.write_text(
        f'name = "{group}"\nnetwork = "none"\n[[task]]\nname = "t"\nimage = "{test_image}"\n'
        'command = ["sleep", "1000"]\nrestart = { policy = "always", delay = 20 }\n'
    )
    up = cli("group up", str(spec))
    assert up.returncode == 0, up.stderr
    ns = ex.client.namespace
    fix = repair(ns, name)
    first = Supervise(cli)
    second: Supervise | None = None
    try:
        until(lambda: is_supervised(ex.client), "the supervisor's presence lock")
        os.kill(ex.inspect(name).pid, signal.SIGKILL)
        until(lambda: ex.inspect(name).restarting, "the supervisor's restart pending", timeout=60)
        first.proc.kill()  # while the restart waits its 20 s: nobody will make it now
        assert first.proc.wait(timeout=30) == -signal.SIGKILL
        until(lambda: not is_supervised(ex.client), "the killed supervisor's lock dropped")

        status = rf"{name} Restarting \(137\) .+ ago \(no supervisor: run ctrexec supervise\)"
        until(lambda: re.fullmatch(status, _status(cli, name)), "ps naming no supervisor")
        listed = cli("ps", "-a", "--filter", f"name={name}")
        warning = f"warning: group {group}: no supervisor"  # said once for the group
        assert warning in listed.stderr and fix in listed.stderr, listed.stderr
        shown = json.loads(cli("inspect", name, check=True).stdout)[0]
        assert shown["State"]["Status"] == "restarting"
        assert "no supervisor serves this namespace" in shown["State"]["Error"]
        assert fix in shown["State"]["Error"]
        assert [p["problem"] for p in shown["Ctrexec"]["problems"]] == [UNSERVED]
        members = cli("group ps", group)
        assert "(no supervisor: run ctrexec supervise)" in members.stdout, members.stdout
        assert fix in members.stderr, members.stderr
        doctor = cli("doctor")
        assert fix in doctor.stdout + doctor.stderr  # the same fix, from the same owner

        second = Supervise(cli)
        until(lambda: ex.inspect(name).status is Status.RUNNING, "the restart", timeout=90)
        pid = ex.inspect(name).pid
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0")
        until(lambda: _status(cli, name).startswith(f"{name} Up "), "ps saying Up")
        assert "no supervisor" not in _status(cli, name)
        shown = json.loads(cli("inspect", name, check=True).stdout)[0]
        assert shown["State"]["Error"] == "" and shown["Ctrexec"]["problems"] == []
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
        first.proc.wait(timeout=30)
        first._reader.join(timeout=10)
        assert first.proc.stderr is not None
        first.proc.stderr.close()
        if second is not None:
            assert second.stop() == 0, second.lines
        cli("group down", group)
