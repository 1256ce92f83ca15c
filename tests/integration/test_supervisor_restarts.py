"""Restarts as ``ctrexec supervise`` makes them, through the real process (issue 18):
a restart that fails is said, retried and shown, and ``stop`` of a task waiting for
its restart keeps it stopped.

The supervisor runs as its own process, as under systemd; ``ps`` and ``inspect``
are other processes that learn of a pending restart from the record's labels alone.
"""

from __future__ import annotations

import json
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
