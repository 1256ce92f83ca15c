"""``AsyncExecutor.logs``'s reader (ctrexec.tasks.aiologs) without a daemon: a follow
ends when the run's exit future ends (after one more read, so nothing written before
is lost), and leaving the stream early cancels the exit future and ends the reader."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import NotFound
from ctrexec.logs.modes import driver_of
from ctrexec.tasks.aio import Relay
from ctrexec.tasks.aiologs import TaskLog
from ctrexec.tasks.executor import Executor

BOUND = 30.0


class _Fake:
    """What TaskLog.open asks of an Executor: the record, and the exit as a future."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.exit: concurrent.futures.Future[ExitStatus] = concurrent.futures.Future()

    def inspect(self, task_id: str, *, addresses: bool = True) -> Any:
        return SimpleNamespace(log_path=str(self.log), config=None, log_driver=driver_of(None))

    def wait_future(self, task_id: str, *, exec_id: str = "") -> Any:
        return self.exit


def _write(log: Path, message: str) -> None:
    line = {"log": message, "stream": "stdout", "time": "2026-12-07T00:00:00.000000001Z"}
    with log.open("a") as f:
        f.write(json.dumps(line) + "\n")


def test_a_follow_ends_with_the_run_and_keeps_what_came_before(tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    _write(log, "one\n")
    fake = _Fake(log)

    async def main() -> list[str]:
        source = TaskLog.open(cast(Executor, fake), "t", follow=True)
        async with Relay(source, asyncio.get_running_loop()) as entries:
            got = [(await asyncio.wait_for(anext(entries), BOUND)).message]
            _write(log, "two\n")
            got.append((await asyncio.wait_for(anext(entries), BOUND)).message)
            _write(log, "three\n")  # before the end: the last read has it
            fake.exit.set_exception(NotFound("no run"))
            async with asyncio.timeout(BOUND):
                got += [e.message async for e in entries]
        return got

    assert asyncio.run(main()) == ["one\n", "two\n", "three\n"]


def test_leaving_early_cancels_the_exit_future_and_ends_the_reader(tmp_path: Path) -> None:
    log = tmp_path / "task.log"
    _write(log, "one\n")
    fake = _Fake(log)

    async def main() -> str:
        source = TaskLog.open(cast(Executor, fake), "t", follow=True)
        async with asyncio.timeout(BOUND):
            async with Relay(source, asyncio.get_running_loop()) as entries:
                async for entry in entries:
                    return entry.message
        return ""

    assert asyncio.run(main()) == "one\n"
    assert fake.exit.cancelled()
