"""``wait`` then ``logs`` shows every line the task wrote, as ``docker wait``/``logs`` do.

containerd reports a task's exit as soon as the shim reaps it, while the last of its
output may still be in the FIFO the log daemon reads (the daemon is rate-bound and
need see no end of stream at the exit). A wait that
reports an exit returns only once the daemon wrote what the pipes held
(:func:`ctrexec.tasks.output.settle`); these tests read the log at once after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _support import until

from ctrexec import errors
from ctrexec.containerd.client import Client
from ctrexec.logs import client as logdaemon_client
from ctrexec.logs import modes as logmodes
from ctrexec.logs import reader as logs
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

ROUNDS = 30
LINES = 30_000
#: Short lines, many of them: the pipes hold ~20k at the exit, which the daemon (50k
#: lines/s at most, ``LINE_RATE``) takes a good part of a second to write.
SCRIPT = f"i=0; while [ $i -lt {LINES} ]; do echo $i; i=$((i+1)); done; printf last"
EXPECTED = "".join(f"{i}\n" for i in range(LINES)) + "last"


@pytest.fixture
def ex(client: Client, tmp_path: Path) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        if info.id.startswith("logw-"):
            with contextlib.suppress(errors.NotFound):
                executor.destroy(info.id, force=True)


def test_logs_right_after_the_cli_wait_show_the_whole_output(cli: Cli, test_image: str) -> None:
    for n in range(ROUNDS):
        name = f"logw-cli-{n}"
        started = cli("run", "-d", "--name", name, test_image, "sh", "-c", SCRIPT)
        assert started.returncode == 0, started.stderr
        try:
            waited = cli("wait", name)
            assert (waited.returncode, waited.stdout) == (0, "0\n"), waited.stderr
            shown = cli("logs", name)
            assert shown.returncode == 0, shown.stderr
            assert shown.stdout == EXPECTED, f"round {n}: {len(shown.stdout)} of {len(EXPECTED)}"
        finally:
            cli("rm", "--force", name)


def test_the_log_is_whole_when_the_library_wait_returns(ex: Executor, test_image: str) -> None:
    for n in range(ROUNDS):
        name = f"logw-lib-{n}"
        handle = ex.start_task(
            TaskConfig(name=name, image=test_image, command=("sh", "-c", SCRIPT))
        )
        assert ex.wait(name, timeout=60).exit_code == 0
        text = "".join(e.message for e in logs.read_logs(handle.log_path))
        assert text == EXPECTED, f"round {n}: {len(text)} of {len(EXPECTED)}"
        ex.destroy(name, force=True)


def _daemon_pid(ex: Executor) -> int:
    reply = logdaemon_client.request({"op": "ping"}, where=logmodes.daemon_dir(ex.state_dir))
    assert reply is not None
    return int(reply["pid"])


def test_a_stuck_log_daemon_holds_a_wait_only_for_its_bound(ex: Executor, test_image: str) -> None:
    """A stopped daemon: the wait returns the exit after the bound, and the log gets
    the output once the daemon runs again."""
    config = TaskConfig(name="logw-stuck", image=test_image, command=("sh", "-c", "echo hi"))
    handle = ex.start_task(config)
    pid = _daemon_pid(ex)
    os.kill(pid, signal.SIGSTOP)
    try:
        assert ex.wait("logw-stuck", timeout=60).exit_code == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    until(
        lambda: "".join(e.message for e in logs.read_logs(handle.log_path)) == "hi\n",
        "the resumed daemon to write the output",
    )
