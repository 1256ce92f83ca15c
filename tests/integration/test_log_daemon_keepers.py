"""Issue 36, item 2: the log daemon SIGKILLed under a task writing ~1000 lines/s.

Its keepers (``ctrexec.tasks.logkeeper``) must bring it back, with no task start to
help: the supervisor's periodic check, and any command that lists or inspects. Each
test checks the real things: a new daemon process alive, the writer's counter going
on well past what the FIFO and the shim's buffers hold (so it was blocked, or would
have been, and resumed), and every line logged once, in order.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _support import supervising, until

from ctrexec import Executor, TaskConfig
from ctrexec.containerd.client import Client
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import daemon as logdaemon
from ctrexec.logs import reader as logs

#: ~1000 lines/s from busybox: one echo, then 1 ms asleep.
FAST = "i=0; while :; do echo line $i; i=$((i+1)); usleep 1000; done"
#: Lines past the count at the kill that prove the writer went on: ~11 bytes each, well
#: beyond the FIFO (64 KiB), the shim's copy buffer and the task's own pipe (64 KiB).
PROGRESS = 20_000
BIG = 512 * 1024 * 1024  # no rotation: every line stays in task.log for the check


def _pid_file() -> Path:
    return logdaemon_client.state_dir() / logdaemon.PIDFILE


def _daemon() -> int | None:
    """The pid of the daemon serving the session's directory, if one is alive."""
    try:
        pid = int(_pid_file().read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if logdaemon.NAME.encode() in cmdline.split(b"\0") else None


def _last(log: Path) -> int:
    """The counter in the log's last whole line (-1 before the first)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4096))
            tail = f.read().split(b"\n")[:-1]
    except OSError:
        return -1
    for line in reversed(tail):
        entry = logs.decode_entry(line)
        if entry is not None and entry.stream == "stdout":
            return int(entry.message.split()[1])
    return -1


def _readers(log: Path) -> set[int]:
    """The log daemons holding the run's FIFOs open, from /proc (the kernel's word)."""
    fifos = {str(p) for p in log.parent.glob(".std*-*.fifo")}
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if logdaemon.NAME.encode() not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            if any(os.readlink(fd) in fifos for fd in (proc / "fd").iterdir()):
                found.add(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def _numbers(log: Path) -> list[int]:
    return [int(e.message.split()[1]) for e in logs.read_logs(str(log)) if e.stream == "stdout"]


@pytest.fixture
def executor(client: Client, tmp_path: Path) -> Executor:
    return Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")


@pytest.fixture
def writer(executor: Executor, test_image: str, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A task writing ~1000 lines/s; at the end, every line it logged, once, in order."""
    name = f"logd-keep-{request.node.name[5:40].replace('_', '-').strip('-')}"
    config = TaskConfig(
        name=name, image=test_image, command=["sh", "-c", FAST], log_max_size=BIG, log_max_files=1
    )
    log = Path(executor.start_task(config).log_path)
    try:
        until(lambda: _last(log) >= 500, "the writer under way")
        yield log
    finally:
        executor.stop(name, timeout=1)
        if _daemon() is None:  # a test that failed may have left it dead
            logdaemon_client.spawn(logdaemon_client.state_dir())
        executor.destroy(name, force=True)
    numbers = _numbers(log)
    assert numbers == list(range(len(numbers)))  # consecutive: nothing lost or repeated


def _kill_daemon() -> int:
    pid = _daemon()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the session's daemon: this session started it
    until(lambda: not Path(f"/proc/{pid}").exists(), "the killed daemon gone")
    return pid


def _back_and_writing(log: Path, killed: int, at_kill: int) -> None:
    until(lambda: _daemon() not in (None, killed), "a new log daemon alive", timeout=60)
    until(lambda: _last(log) > at_kill + PROGRESS, "the writer going on", timeout=120)


def test_the_supervisor_brings_a_killed_log_daemon_back(executor: Executor, writer: Path) -> None:
    """Before: nothing brought it back but the next task start; the writer blocked in
    anon_pipe_write within 15-20 s while ps said Up."""
    with supervising(executor):
        at_kill = _last(writer)
        killed = _kill_daemon()
        _back_and_writing(writer, killed, at_kill)


def test_ps_brings_a_killed_log_daemon_back(cli: Cli, writer: Path) -> None:
    killed = _kill_daemon()
    at_kill = _last(writer)
    cli("ps", check=True)
    _back_and_writing(writer, killed, at_kill)


def test_inspect_finds_the_runs_again_after_the_state_dir_was_wiped(cli: Cli, writer: Path) -> None:
    """Before: the registrations were gone with /run, so a new daemon adopted nothing
    and the task's logging stayed dead, doctor clean, until `ctrexec restart`."""
    killed = _kill_daemon()
    at_kill = _last(writer)
    shutil.rmtree(logdaemon_client.state_dir())
    cli("inspect", writer.parent.name, check=True)  # the log's directory is named by its id
    _back_and_writing(writer, killed, at_kill)


def test_a_daemon_whose_state_was_wiped_under_it_keeps_one_reader_and_is_replaced(
    cli: Cli, writer: Path
) -> None:
    """The daemon lives on without its files; a command must not have a second daemon
    read the same FIFOs (lines would split); once the old one is killed, doctor has a
    new one read them. Before: nothing read them again until a restart."""
    old = _daemon()
    assert old is not None
    shutil.rmtree(logdaemon_client.state_dir())
    cli("ps", check=True)  # finds the run again, and that a daemon reads it
    assert _readers(writer) == {old}  # no second reader (ps has returned)
    until(lambda: _last(writer) > 2000, "the old daemon still logging")
    os.kill(old, signal.SIGKILL)  # the session's daemon: this session started it
    until(lambda: not Path(f"/proc/{old}").exists(), "the old daemon gone")
    at_kill = _last(writer)
    cli("doctor")
    _back_and_writing(writer, old, at_kill)
    until(lambda: _daemon() is not None, "a daemon serving the state dir")


def test_a_daemon_that_cannot_start_is_named_by_ps_inspect_and_doctor(
    cli: Cli, writer: Path, tmp_path: Path
) -> None:
    """Logging that had to stop is said, with the fix; the right place brings it back."""
    killed = _kill_daemon()
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    env = {**os.environ, "CTREXEC_LOGD_DIR": str(blocked / "logd")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = cli.argv(*args)
        return subprocess.run(
            argv, check=False, capture_output=True, text=True, env=env, timeout=120
        )

    ps = run("ps")
    assert ps.returncode == 0 and "logging stopped" in ps.stderr, ps.stderr
    inspected = run("inspect", "--format", "{{.State.Error}}", writer.parent.name)
    assert "logging stopped" in inspected.stdout and "ctrexec doctor" in inspected.stdout
    doctor = run("doctor")
    assert doctor.returncode != 0 and "logdaemon" in doctor.stdout + doctor.stderr
    at_kill = _last(writer)
    cli("doctor")  # the daemon's own place: it starts it
    _back_and_writing(writer, killed, at_kill)
