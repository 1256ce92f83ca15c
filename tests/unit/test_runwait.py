"""When a wait takes a run with no task for a start in progress (ctrexec.tasks.runwait):
a start numbers its run before it makes the task, so a wait that comes in between
waits for that start instead of answering NotFound (the supervisor's restarts, CI)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ctrexec import ExitStatus, Status, TaskInfo
from ctrexec.tasks import runwait


def _info(run: int, age: float | None, exit_status: ExitStatus | None = None) -> TaskInfo:
    started = None if age is None else datetime.now(UTC) - timedelta(seconds=age)
    return TaskInfo(
        id="t", image="img", status=Status.CREATED, pid=0, exit=exit_status,
        netns_path=None, netns_mode="host", group=None, log_path="", labels={},
        created_at=None, config=None, run=run, started_at=started,
    )  # fmt: skip


def test_a_run_numbered_just_now_with_no_task_is_a_start_in_progress() -> None:
    assert runwait._starting(_info(2, age=0.5))
    assert runwait._starting(_info(1, age=runwait.STARTING_FOR - 5))


def test_what_is_no_start_in_progress() -> None:
    assert not runwait._starting(_info(0, age=None))  # created, never started
    assert not runwait._starting(_info(3, age=runwait.STARTING_FOR + 5))  # its task went
    assert not runwait._starting(_info(2, age=0.5, exit_status=ExitStatus(exit_code=1)))
    assert not runwait._starting(_info(2, age=None))  # a run from before runs had times
