"""The shared log daemon with real tasks: what happens to output when it dies, and
that every run's registration ends (with its task's output, or with a failed start).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from _support import until

from ctrexec import Executor, TaskConfig
from ctrexec.containerd.client import Client
from ctrexec.errors import CtrexecError
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import reader as logs
from ctrexec.testing import wait_for

COUNTER = "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done"


def _state() -> Path:
    return logdaemon_client.state_dir()


def _daemon_pid() -> int:
    return int((_state() / logdaemon.PIDFILE).read_text())


def _numbers(path: Path) -> list[int]:
    return [int(e.message.split()[1]) for e in logs.read_logs(str(path)) if e.stream == "stdout"]


@pytest.fixture
def executor(client: Client, tmp_path: Path) -> Executor:
    return Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")


def test_a_task_outlives_a_killed_log_daemon_and_loses_no_line(
    executor: Executor, test_image: str, tmp_path: Path
) -> None:
    """The shim keeps a read end of each FIFO: with no daemon, output waits (64 KiB)."""
    name = "logd-killed"
    handle = executor.start_task(
        TaskConfig(name=name, image=test_image, command=["sh", "-c", COUNTER])
    )
    log = Path(handle.log_path)
    try:
        until(lambda: log.exists() and len(_numbers(log)) >= 5, "first lines logged")
        pid = _daemon_pid()
        os.kill(pid, signal.SIGKILL)  # the session's daemon: this session started it
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what="daemon gone")
        before = len(_numbers(log))
        # A start of any task brings a daemon back, which adopts the running one.
        other = executor.start_task(
            TaskConfig(name=f"{name}-2", image=test_image, command=["true"])
        )
        assert other.pid > 0
        until(lambda: len(_numbers(log)) > before + 20, "lines logged by the new daemon")
        assert executor.inspect(name).status.value == "running"  # no SIGPIPE
    finally:
        executor.stop(name, timeout=1)
        executor.destroy(name, force=True)
        executor.destroy(f"{name}-2", force=True)
    numbers = _numbers(log) if log.exists() else []
    assert numbers == list(range(len(numbers)))  # consecutive: nothing lost or repeated


def test_each_run_ends_its_registration(
    executor: Executor, test_image: str, tmp_path: Path
) -> None:
    name = "logd-runs"
    config = TaskConfig(name=name, image=test_image, command=["sh", "-c", "echo run; exit 3"])
    handle = executor.start_task(config)
    try:
        assert executor.wait(name).exit_code == 3
        until(lambda: not logdaemon_client.registrations(), "the first run's registration to end")
        executor.start(name)
        assert executor.wait(name).exit_code == 3
        until(lambda: not logdaemon_client.registrations(), "the second run's registration to end")
        lines = [e.message for e in logs.read_logs(handle.log_path)]
        assert lines == ["run\n", "run\n"]
    finally:
        executor.destroy(name, force=True)


def test_a_start_that_fails_leaves_no_registration(executor: Executor, test_image: str) -> None:
    name = "logd-nocmd"
    with pytest.raises(CtrexecError, match="no-such-command"):
        executor.start_task(TaskConfig(name=name, image=test_image, command=["no-such-command"]))
    assert logdaemon_client.registrations() == []
    assert not list(Path(executor.log_dir).rglob("*.fifo"))


def test_reap_returns_with_the_log_whole(executor: Executor, test_image: str) -> None:
    """``run --rm`` reads the log after reap: the last, unterminated line is there."""
    name = "logd-reap"
    script = "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; printf tail"
    handle = executor.start_task(
        TaskConfig(name=name, image=test_image, command=["sh", "-c", script])
    )
    try:
        assert executor.wait(name).exit_code == 0
        executor.reap(name)
        entries = list(logs.read_logs(handle.log_path))
        assert len(entries) == 2001 and entries[-1].message == "tail"
    finally:
        executor.destroy(name, force=True)
