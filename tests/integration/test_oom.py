"""OOM kills are reported: ExitStatus/TaskInfo ``oom_killed``, ``inspect``, ``ps -a``.

No supervisor runs here: the fact comes from the stopped task's cgroup counter, so
``inspect`` right after the death already says it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import Cli
from _limits import HOG, OOM_LIMIT
from _support import scratch_executor

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "oom-") as executor:
        yield executor


def test_oom_killed_task_says_so(ex: Executor, test_image: str, cli: Cli) -> None:
    name = "oom-hog"
    ex.start_task(TaskConfig(name=name, image=test_image, command=HOG, memory=OOM_LIMIT))
    status = ex.wait(name, timeout=60)
    assert status.exit_code == 137 and status.oom_killed

    info = ex.inspect(name)
    assert info.status is Status.STOPPED
    assert info.oom_killed and info.exit is not None and info.exit.oom_killed
    assert info.to_json()["oom_killed"] is True
    assert info.to_json()["exit"]["oom_killed"] is True
    listed = {i.id: i for i in ex.list(all_tasks=True)}
    assert listed[name].oom_killed

    shown = json.loads(cli("inspect", name, timeout=60, check=True).stdout)
    assert shown[0]["State"]["OOMKilled"] is True and shown[0]["Ctrexec"]["oom_killed"]
    rows = [
        line for line in cli("ps", "-a", timeout=60, check=True).stdout.splitlines() if name in line
    ]
    assert len(rows) == 1 and "Exited (137, OOM killed)" in rows[0], rows


def test_plain_sigkill_is_not_an_oom_kill(ex: Executor, test_image: str) -> None:
    name = "oom-not"
    ex.start_task(
        TaskConfig(name=name, image=test_image, command=("sleep", "1000"), memory=OOM_LIMIT)
    )
    ex.signal(name, "SIGKILL")
    status = ex.wait(name, timeout=30)
    assert status.exit_code == 137 and not status.oom_killed
    assert not ex.inspect(name).oom_killed
    assert ex.inspect(name).to_json()["oom_killed"] is False
