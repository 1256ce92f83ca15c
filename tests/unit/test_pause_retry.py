"""A pause the kernel's freezer gave up on is tried again; other refusals are not."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec.containerd.tasks import Status
from ctrexec.errors import DeadlineExceeded, FailedPrecondition, Internal
from ctrexec.tasks import control

GAVE_UP = "Tasks.Pause: OCI runtime pause failed: unable to freeze: unknown"


class Freezer:
    """tasks.pause as runc answers it: ``failures`` refusals, then a pause."""

    def __init__(self, failures: int, message: str = GAVE_UP) -> None:
        self.failures = failures
        self.message = message
        self.calls = 0

    def __call__(self, client: Any, task_id: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise Internal(self.message)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []
    monkeypatch.setattr(control.time, "sleep", pauses.append)
    monkeypatch.setattr(control, "_status", lambda client, task_id: Status.RUNNING)
    return pauses


def test_a_freeze_that_gave_up_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, slept: list[float]
) -> None:
    freezer = Freezer(failures=2)
    monkeypatch.setattr(control.tasks, "pause", freezer)
    control.pause(None, "web")  # type: ignore[arg-type]
    assert freezer.calls == 3
    assert slept == list(control.FREEZE_RETRIES[:2])


def test_a_freeze_that_never_settles_is_reported_with_the_task_still_running(
    monkeypatch: pytest.MonkeyPatch, slept: list[float]
) -> None:
    freezer = Freezer(failures=100)
    monkeypatch.setattr(control.tasks, "pause", freezer)
    with pytest.raises(DeadlineExceeded, match=r"web could not be paused.*still running"):
        control.pause(None, "web")  # type: ignore[arg-type]
    assert freezer.calls == len(control.FREEZE_RETRIES) + 1
    assert slept == list(control.FREEZE_RETRIES)


def test_another_refusal_is_not_retried(
    monkeypatch: pytest.MonkeyPatch, slept: list[float]
) -> None:
    freezer = Freezer(failures=1, message="Tasks.Pause: something else")
    monkeypatch.setattr(control.tasks, "pause", freezer)
    with pytest.raises(Internal, match="something else"):
        control.pause(None, "web")  # type: ignore[arg-type]
    assert freezer.calls == 1
    assert slept == []


def test_a_paused_task_is_refused_in_dockers_words(
    monkeypatch: pytest.MonkeyPatch, slept: list[float]
) -> None:
    monkeypatch.setattr(control.tasks, "pause", Freezer(failures=1))
    monkeypatch.setattr(control, "_status", lambda client, task_id: Status.PAUSED)
    with pytest.raises(FailedPrecondition, match="web is already paused"):
        control.pause(None, "web")  # type: ignore[arg-type]
    assert slept == []
