"""TaskInfo.done: a scheduler's "the job is over", by the supervisor's own restart rule."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ctrexec import ExitStatus, Status, TaskInfo
from ctrexec import labels as lbl


def _info(
    status: Status,
    exit_code: int | None,
    labels: Mapping[str, str],
    *,
    restarting: bool = False,
    newer_run: int | None = None,
) -> TaskInfo:
    return TaskInfo(
        id="job",
        image="busybox",
        status=status,
        pid=0,
        exit=None if exit_code is None else ExitStatus(exit_code=exit_code),
        netns_path=None,
        netns_mode="none",
        group=None,
        log_path="",
        labels=labels,
        created_at=None,
        config=None,
        restarting=restarting,
        newer_run=newer_run,
    )


ON_FAILURE = {lbl.RESTART_POLICY: "on-failure", lbl.RESTART_MAX: "2"}


@pytest.mark.parametrize(
    ("status", "code", "labels", "done"),
    [
        (Status.STOPPED, 0, {}, True),  # no policy: the first exit ends it
        (Status.STOPPED, 3, {}, True),
        (Status.RUNNING, None, {}, False),
        (Status.STOPPED, None, {}, False),  # no exit seen (a host restart took it)
        (Status.STOPPED, 0, ON_FAILURE, True),  # on-failure and a success
        (Status.STOPPED, 3, ON_FAILURE, False),  # a failure with attempts left
        (Status.STOPPED, 3, {**ON_FAILURE, lbl.RESTART_COUNT: "2"}, True),  # none left
        (Status.STOPPED, 0, {lbl.RESTART_POLICY: "always"}, False),
        (Status.STOPPED, 0, {lbl.RESTART_POLICY: "always", lbl.STOPPED_BY_USER: "true"}, True),
    ],
)
def test_done_follows_the_restart_rule(
    status: Status, code: int | None, labels: Mapping[str, str], done: bool
) -> None:
    assert _info(status, code, labels).done is done


def test_not_done_while_a_restart_is_due_or_for_an_older_run() -> None:
    assert not _info(Status.STOPPED, 0, {}, restarting=True).done
    assert not _info(Status.STOPPED, 0, {}, newer_run=2).done
