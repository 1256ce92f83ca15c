"""Rules on what happens to a task, held by the library so every front end gets them.

Driven through :class:`Executor` alone (no CLI): stopping an auto-remove task removes
it, as docker's stop of an ``--rm`` container (a restart's stop keeps it), and waiting
on a task never started waits for its run, as docker's ``wait`` of a created container.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _support import gone, scratch_executor

from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.errors import DeadlineExceeded, NotFound
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "lr-") as executor:
        yield executor


def _cfg(name: str, image: str, *cmd: str, auto_remove: bool = False) -> TaskConfig:
    return TaskConfig(name=name, image=image, command=cmd, auto_remove=auto_remove)


def test_stop_of_an_auto_remove_task_removes_it(ex: Executor, test_image: str) -> None:
    handle = ex.start_task(_cfg("lr-stop", test_image, "sleep", "1000", auto_remove=True))
    log_dir = Path(handle.log_path).parent
    assert log_dir.exists()
    status = ex.stop("lr-stop", timeout=1)
    assert status is not None and status.exit_code in (137, 143)
    assert gone(ex.client, "lr-stop")  # containerd holds no record of it
    assert not log_dir.exists()
    with pytest.raises(NotFound):
        ex.inspect("lr-stop")


def test_stop_without_remove_keeps_an_auto_remove_task_to_start_again(
    ex: Executor, test_image: str
) -> None:
    """A restart's stop: docker's restart of an ``--rm`` container restarts it."""
    ex.start_task(_cfg("lr-keep", test_image, "sleep", "1000", auto_remove=True))
    ex.stop("lr-keep", timeout=1, remove=False)
    assert ex.inspect("lr-keep").status is Status.STOPPED
    ex.start("lr-keep")
    assert ex.inspect("lr-keep").status is Status.RUNNING


def test_stop_of_a_plain_task_keeps_it(ex: Executor, test_image: str) -> None:
    ex.start_task(_cfg("lr-plain", test_image, "sleep", "1000"))
    ex.stop("lr-plain", timeout=1)
    assert not gone(ex.client, "lr-plain")
    assert ex.inspect("lr-plain").status is Status.STOPPED


def test_wait_of_a_created_task_waits_for_its_run(ex: Executor, test_image: str) -> None:
    ex.create(_cfg("lr-created", test_image, "sh", "-c", "exit 7"))
    # Not asked to wait for a start: nothing to wait on (as a run lost with its shim).
    with pytest.raises(NotFound):
        ex.wait("lr-created", timeout=120)
    # Never started, it cannot exit: the bound passes (it was NotFound at once before).
    with pytest.raises(DeadlineExceeded):
        ex.wait("lr-created", timeout=2, until_started=True)
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiter = pool.submit(ex.wait, "lr-created", 120, until_started=True)
        ex.start("lr-created")
        assert waiter.result(timeout=150).exit_code == 7


def test_wait_of_a_created_task_ends_when_it_is_removed(ex: Executor, test_image: str) -> None:
    ex.create(_cfg("lr-removed", test_image, "true"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiter = pool.submit(ex.wait, "lr-removed", 120, until_started=True)
        ex.destroy("lr-removed")
        with pytest.raises(NotFound):
            waiter.result(timeout=150)


def test_wait_of_a_run_whose_task_was_deleted_answers_its_kept_exit(
    ex: Executor, test_image: str
) -> None:
    """A rename deletes the stopped task and keeps its exit in the record: docker's
    ``wait`` of an exited container answers that exit at once."""
    ex.start_task(_cfg("lr-kept", test_image, "sh", "-c", "exit 3"))
    assert ex.wait("lr-kept", timeout=120).exit_code == 3
    ex.rename("lr-kept", "lr-kept2")
    assert ex.wait("lr-kept2", timeout=120).exit_code == 3
