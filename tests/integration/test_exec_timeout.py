"""exec(timeout=...) kills the process at the deadline and raises then.

The old code waited up to 30 s on each output reader before it killed anything, so a
1 s timeout raised after about 61 s. The guards below are hang guards (20x the
deadline), not performance figures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli

from ctrexec import errors
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

HANG_GUARD = 20.0


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    executor.start_task(TaskConfig(name="exto", image=test_image, command=("sleep", "600")))
    try:
        yield executor
    finally:
        executor.destroy("exto", force=True)


def _sleepers(ex: Executor) -> list[str]:
    """The task's processes other than its init, read from inside the task."""
    ps = ex.exec("exto", ["ps", "-o", "pid,args"]).stdout.decode()
    return [line for line in ps.splitlines() if "sleep 120" in line and "ps -o" not in line]


def test_library_exec_timeout_kills_at_deadline(ex: Executor) -> None:
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            ex.exec("exto", ["sleep", "120"], timeout=1)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    t.start()
    t.join(HANG_GUARD)
    assert not t.is_alive(), f"exec(timeout=1) still running after {HANG_GUARD}s"
    print(f"exec(timeout=1) raised after {time.monotonic() - started:.2f}s")
    assert len(outcome) == 1 and isinstance(outcome[0], errors.DeadlineExceeded)
    assert _sleepers(ex) == []  # the exec'd process was killed, not left running
    assert ex.inspect("exto").status is Status.RUNNING  # the task itself is untouched


def test_exec_output_with_background_child_is_bounded(ex: Executor) -> None:
    """A background child that keeps the pipe open does not hold the caller for ever."""
    done: list[bytes] = []
    t = threading.Thread(
        target=lambda: done.append(ex.exec("exto", ["sh", "-c", "echo ready; sleep 120 &"]).stdout),
        daemon=True,
    )
    t.start()
    t.join(HANG_GUARD)
    assert not t.is_alive()
    assert done == [b"ready\n"]  # the task's destroy ends the background child


def test_cli_exec_timeout(ex: Executor, cli: Cli) -> None:
    res = cli("exec", "--timeout", "1", "exto", "sleep", "120", timeout=HANG_GUARD)
    assert res.returncode == 125
    assert res.stderr.count("\n") == 1 and "did not finish within 1s" in res.stderr
    assert _sleepers(ex) == []


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "inf"])
def test_cli_exec_timeout_bad_value(ex: Executor, cli: Cli, bad: str) -> None:
    res = cli("exec", "--timeout", bad, "exto", "true", timeout=HANG_GUARD)
    assert res.returncode == 125
    assert res.stderr.count("\n") == 1 and "--timeout" in res.stderr
