"""An exec at the edges of its task's life, where containerd 2.x changed what it does.

From 2.0, containerd refuses an exec once the task's init process has exited, and it
sends the init's ``/tasks/exit`` only after the exits of the execs that were running
when the init died. Both are asserted here on the session's containerd, whichever
version it is (the host's 1.6, or the 1.7 and 2.1 that CTREXEC_CONTAINERD_BIN names),
so a difference between versions shows up as a failure on one of them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec import errors
from ctrexec.containerd.client import Client
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def ex(client: Client, tmp_path: Path) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    yield executor
    for info in executor.list(all_tasks=True):
        executor.destroy(info.id, force=True)


def _start(ex: Executor, name: str, image: str, *cmd: str) -> None:
    ex.start_task(TaskConfig(name=name, image=image, command=cmd))


def test_an_exec_after_the_init_exited_is_refused_in_dockers_words(
    ex: Executor, test_image: str, cli: Cli
) -> None:
    _start(ex, "exl-done", test_image, "sh", "-c", "exit 4")
    assert ex.wait("exl-done", timeout=60).exit_code == 4
    with pytest.raises(errors.FailedPrecondition, match=r"^container exl-done is not running$"):
        ex.exec("exl-done", ["true"])
    with pytest.raises(errors.FailedPrecondition, match=r"^container exl-done is not running$"):
        ex.exec_stream("exl-done", ["true"])
    out = cli("exec", "exl-done", "true")
    assert (out.returncode, out.stderr) == (1, "ctrexec: container exl-done is not running\n")


def test_an_exec_running_when_its_init_is_killed_ends_and_both_exits_arrive(
    ex: Executor, test_image: str
) -> None:
    _start(ex, "exl-kill", test_image, "sleep", "1000")
    with ex.exec_stream("exl-kill", ["sh", "-c", "echo up; exec sleep 1000"]) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        ex.signal("exl-kill", signal.SIGKILL)
        # The kernel kills every process of the task's pid namespace with its init:
        # the exec's exit comes first on 2.x, the init's after it; each is heard.
        assert proc.wait(timeout=60).exit_code == 137
    assert ex.wait("exl-kill", timeout=60).exit_code == 137
    wait_for(
        lambda: ex.inspect("exl-kill").status.value == "stopped",
        timeout=30,
        what="the task stopped",
    )
