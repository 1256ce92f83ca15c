"""Task logs through the executor and the CLI, under the session's containerd.

The shim keeps its copies of the pipes' write ends until the task is deleted, so a
task's exit is no end of stream for the log driver: what these tests pin down is that
a last line without a newline still reaches the log (and ``run``, and ``logs``)
while the task is stopped but not deleted, and that deleting never hangs.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _procs import gone
from _support import until

from ctrexec import errors
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.logs import reader as logs
from ctrexec.logs.driver import DRIVER_NAME
from ctrexec.logs.modes import PROCESS
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

MIB = 1 << 20
DESTROY_CYCLES = 100


@pytest.fixture
def ex(client: Client, test_image: str, tmp_path: Path) -> Iterator[Executor]:
    """An executor logging under tmp_path; destroys what a test left."""
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        if info.id.startswith("logt-"):
            with contextlib.suppress(errors.NotFound):
                executor.destroy(info.id, force=True)


def cli(
    address: str, logs_dir: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    base = [sys.executable, "-m", "ctrexec.cli.main"]
    conn = ["--address", address, "--namespace", TEST_NAMESPACE]
    if args[0] == "run":
        conn += ["--log-dir", str(logs_dir)]
    return subprocess.run(
        [*base, args[0], *conn, *args[1:]], capture_output=True, timeout=timeout, check=False
    )


def text(path: str | Path, stream: str = "stdout") -> str:
    """The stream as ``docker logs`` prints it: the entries' messages, joined."""
    return "".join(e.message for e in logs.read_logs(path) if e.stream == stream)


@pytest.mark.parametrize(
    ("name", "command", "expected"),
    [
        ("logt-echo-n", ["echo", "-n", "x"], b"x"),
        ("logt-printf", ["sh", "-c", "printf partial"], b"partial"),
        ("logt-mixed", ["sh", "-c", "echo one; printf two"], b"one\ntwo"),
    ],
)
def test_run_prints_a_last_line_without_newline(
    name: str,
    command: list[str],
    expected: bytes,
    client: Client,
    containerd_address: str,
    test_image: str,
    tmp_path: Path,
) -> None:
    """``ctrexec run --rm`` prints it (and deletes the log); ``run`` + ``logs`` too."""
    logs_dir = tmp_path / "logs"
    out = cli(containerd_address, logs_dir, "run", "--rm", "--name", name, test_image, *command)
    assert (out.returncode, out.stdout) == (0, expected), out.stderr
    kept = f"{name}-kept"
    out = cli(containerd_address, logs_dir, "run", "--name", kept, test_image, *command)
    try:
        assert (out.returncode, out.stdout) == (0, expected), out.stderr
        # The task is stopped, not deleted: the shim still holds the pipes open.
        shown = cli(containerd_address, logs_dir, "logs", kept)
        assert (shown.returncode, shown.stdout) == (0, expected), shown.stderr
        path = logs_dir / TEST_NAMESPACE / kept / "task.log"
        last = list(logs.read_logs(path))[-1]
        assert last.partial and last.message == expected.decode().rsplit("\n", 1)[-1]
    finally:
        cli(containerd_address, logs_dir, "rm", "--force", kept)


def test_one_mib_line_binary_bytes_and_partial_end(ex: Executor, test_image: str) -> None:
    # The image has no python: build the bytes with the shell. 1 MiB of "a" in one
    # line (printf's %s repeats), then bytes 0x80..0xff (not UTF-8) and no newline.
    script = (
        "s=aaaaaaaaaaaaaaaa; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do s=$s$s; done; "
        'echo "$s"; printf "bin:\\200\\201\\376\\377 end"'
    )
    h = ex.start_task(TaskConfig(name="logt-big", image=test_image, command=("sh", "-c", script)))
    assert ex.wait("logt-big", timeout=60).exit_code == 0
    until(lambda: text(h.log_path).endswith(" end"), "the partial last line in the log")
    got = text(h.log_path)
    assert got == "a" * MIB + "\nbin:" + "\ufffd" * 4 + " end"
    pieces = [e for e in logs.read_logs(h.log_path) if e.stream == "stdout"]
    assert all(len(e.message.rstrip("\n").encode()) <= logs.MAX_LINE for e in pieces)
    assert pieces[-1].partial
    ex.destroy("logt-big")


def test_task_killed_mid_line_keeps_the_text(ex: Executor, test_image: str) -> None:
    script = "echo before; printf 'half a li'; exec sleep 600"
    h = ex.start_task(TaskConfig(name="logt-kill", image=test_image, command=("sh", "-c", script)))
    until(lambda: text(h.log_path) == "before\nhalf a li", "the partial line while running")
    ex.signal("logt-kill", "SIGKILL")
    assert ex.wait("logt-kill", timeout=30).exit_code == 137
    assert ex.inspect("logt-kill").status is Status.STOPPED
    assert text(h.log_path) == "before\nhalf a li"
    ex.destroy("logt-kill")


def _driver_of(log_path: Path) -> int:
    """The pid of the log driver the shim runs for the task logging to ``log_path``."""
    arg = str(log_path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if arg in argv and any(DRIVER_NAME.encode() in a for a in argv):
                found.append(int(entry.name))
    assert len(found) == 1, f"log drivers for {log_path}: {found}"
    return found[0]


def test_destroy_of_a_logging_task_leaves_no_driver_behind(ex: Executor, test_image: str) -> None:
    """Many create/destroy cycles of a task that logs all the time, each with its own
    log driver process (issue 7, item 13).

    Each destroy must end the task's driver: it drains the pipes the shim closed,
    writes the rest and exits, and the destroy removes the log. That it exits on
    the shim's SIGTERM, not at the shim's SIGKILL 12 s later, is
    tests/unit/test_logs.py's ``..._on_every_sigterm_while_its_streams_are_busy``,
    where the driver is the test's child and its exit status can be read. A keeper
    task holds the group's shim, so a cycle pays for a container and a task, not for
    a shim. The times are printed, not asserted.
    """
    group = "logt-cycles"
    keeper = TaskConfig(
        name="logt-keeper", image=test_image, command=("sleep", "3600"), group=group
    )
    ex.start_task(keeper)
    loop = "while :; do echo tick; done"  # a builtin: no fork per line
    durations: list[float] = []
    began = time.monotonic()
    for i in range(DESTROY_CYCLES):
        name = f"logt-cycle-{i % 2}"
        h = ex.start_task(
            TaskConfig(
                name=name,
                image=test_image,
                command=("sh", "-c", loop),
                group=group,
                log_transport=PROCESS,
            )
        )
        log = Path(h.log_path)
        until(lambda: log.stat().st_size > 0, "the first line")  # noqa: B023
        driver = _driver_of(log)
        start = time.monotonic()
        ex.destroy(name, force=True)
        durations.append(time.monotonic() - start)
        until(lambda: gone(driver), f"cycle {i}: the log driver {driver} gone")  # noqa: B023
        assert not [t for t in ex.list(all_tasks=True) if t.id == name], f"cycle {i}: {name} left"
    total = time.monotonic() - began
    ex.destroy("logt-keeper", force=True)
    durations.sort()
    print(
        f"{DESTROY_CYCLES} destroys in {total:.0f}s: median {durations[len(durations) // 2]:.3f}s,"
        f" p99 {durations[int(len(durations) * 0.99)]:.3f}s, slowest {durations[-1]:.3f}s"
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_foreground_run_forwards_signals_to_the_task(
    cli: Cli, test_image: str, client: Client, tmp_path: Path, sig: signal.Signals
) -> None:
    """The CLI's handler only records the signal; the read loop forwards it."""
    name = f"fwd-{sig.name.lower()}"
    script = f"trap 'echo got {sig.name}; exit 7' {sig.name[3:]}; echo ready; while :; do sleep 0.1; done"
    proc = subprocess.Popen(
        cli.argv("run", "--rm", "--name", name, test_image, "sh", "-c", script),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 7, err
    assert out == f"got {sig.name}\n"
    until(lambda: not containers.list_containers(client, f"id=={name}"), f"{name} removed")


def test_run_rm_prints_the_whole_log_every_time(cli: Cli, test_image: str) -> None:
    """``run --rm`` deletes the task at its exit and then reads the rest of the log: the
    shim waits for the log driver to finish before Delete returns, so nothing is lost."""
    outs = [
        cli("run", "--rm", test_image, "sh", "-c", "echo one; printf partial").stdout
        for _ in range(15)
    ]
    assert outs == ["one\npartial"] * 15
