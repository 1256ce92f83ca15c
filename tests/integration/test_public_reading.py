"""A reader with only a Client (the CLI's ``ps``, ``inspect`` and ``logs``, a
dashboard): ``inspect_task`` and ``list_tasks`` see what the Executor's calls see, and
``read_logs(exited=)`` follows a log until it is whole, its last line written after the
exit included."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ctrexec import (
    Client,
    Executor,
    Status,
    TaskConfig,
    inspect_task,
    list_tasks,
    read_logs,
)


@pytest.fixture
def executor(client: Client, tmp_path: Path) -> Executor:
    return Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")


def test_a_client_alone_inspects_lists_and_follows_a_task_until_its_log_is_whole(
    executor: Executor, client: Client, test_image: str
) -> None:
    name = "public-reading"
    # The last line has no newline: the log driver writes it only once the pipe is
    # quiet, after the exit.
    script = "echo one; sleep 1; printf last"
    executor.start_task(TaskConfig(name=name, image=test_image, command=["sh", "-c", script]))
    try:
        info = inspect_task(client, name, state_dir=executor.state_dir)
        same = executor.inspect(name)
        assert (info.id, info.run, info.log_path, info.config) == (
            same.id,
            same.run,
            same.log_path,
            same.config,
        )
        info.check_logs()  # json-file through the daemon: there is a log to follow

        # Exited once the wait returned: then the log daemon wrote all the task wrote,
        # so a loaded host's slow daemon cannot lose the last line to the settle time.
        waited = threading.Event()

        def waiter() -> None:
            try:
                executor.wait(name, timeout=120)
            finally:
                waited.set()

        threading.Thread(target=waiter, daemon=True).start()
        got = read_logs(info.log_path, driver=info.log_driver, follow=True, exited=waited.is_set)
        assert "".join(e.message for e in got) == "one\nlast"
        assert inspect_task(client, name, addresses=False).status is Status.STOPPED
        assert name not in [i.id for i in list_tasks(client)]  # running and paused only
        everything = list_tasks(client, all_tasks=True, state_dir=executor.state_dir)
        assert [i.exit_code for i in everything if i.id == name] == [0]
        assert info.log_dropped_bytes() == 0
    finally:
        executor.destroy(name, force=True)
