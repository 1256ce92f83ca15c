"""Executor.events() against real containerd: every event type, and the filters."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE
from _eventlog import EventLog
from _support import scratch_executor

from ctrexec import labels as lbl
from ctrexec.containerd.client import Client
from ctrexec.containerd.events import ExecExited, TaskDeleted, TaskEvent, TaskExited
from ctrexec.errors import Unavailable
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

#: Exits with 5 at SIGTERM (a PID 1 without a handler ignores it).
TRAPPER = ("sh", "-c", 'trap "exit 5" TERM; while :; do sleep 0.1; done')


@pytest.fixture
def ex(client: Client, tmp_path: Path, test_image: str) -> Iterator[Executor]:
    with scratch_executor(client, tmp_path, "ev-") as executor:
        yield executor


def test_a_tasks_life_in_events(ex: Executor, test_image: str) -> None:
    name = "ev-life"
    log = EventLog(ex, ex.events(tasks=[name]), lambda i: i == name)
    try:
        handle = ex.start_task(TaskConfig(name=name, image=test_image, command=TRAPPER))
        ex.pause(name)
        ex.resume(name)
        assert ex.exec(name, ["sh", "-c", "exit 3"]).exit_code == 3
        ex.signal(name, "SIGTERM")
        log.await_exits([name], "the task's exit")
        ex.destroy(name)
        log.await_kind(name, "delete")
    finally:
        log.close()
    seen = log.of(name)
    assert [e.kind for e in seen] == [
        "start",
        "pause",
        "resume",
        "exec-start",
        "exec-exit",
        "exit",
        "delete",
    ]
    assert seen[0].pid == handle.pid  # type: ignore[attr-defined]
    exec_exit = seen[4]
    assert isinstance(exec_exit, ExecExited) and exec_exit.exit.exit_code == 3
    assert exec_exit.exec_id == seen[3].exec_id  # type: ignore[attr-defined]
    exit_event = seen[5]
    assert isinstance(exit_event, TaskExited)
    assert exit_event.exit.exit_code == 5 and not exit_event.exit.oom_killed
    assert exit_event.exit.exited_at is not None and exit_event.pid == handle.pid
    deleted = seen[6]
    assert isinstance(deleted, TaskDeleted) and deleted.exit == exit_event.exit
    assert all(e.namespace == ex.client.namespace and e.at is not None for e in seen)
    assert log.errors == [] and log.missed == 0


def test_filters_by_group_label_and_type(ex: Executor, test_image: str) -> None:
    def make(name: str, group: str, tier: str) -> None:
        cfg = TaskConfig(
            name=name, image=test_image, command=("sleep", "1000"), labels={"tier": tier}
        )
        ex.create(cfg, owner_labels={lbl.GROUP: group})
        ex.start(name)

    names = ["ev-f-a", "ev-f-b"]
    by_group = EventLog(ex, ex.events(groups=["ev-g1"]), names.__contains__)
    by_label = EventLog(ex, ex.events(labels={"tier": "back"}), names.__contains__)
    by_type = EventLog(ex, ex.events(tasks=names, types=["die"]), names.__contains__)
    try:
        make("ev-f-a", "ev-g1", "front")
        make("ev-f-b", "ev-g2", "back")
        # Killed in this order, so a's exit reaches every stream after b's would have.
        ex.signal("ev-f-b", "SIGKILL")
        by_label.await_exits(["ev-f-b"], "b's exit on the label stream")
        ex.signal("ev-f-a", "SIGKILL")
        by_group.await_exits(["ev-f-a"], "a's exit on the group stream")
        by_type.await_exits(names, "both exits on the type stream")
    finally:
        for log in (by_group, by_label, by_type):
            log.close()
    group_seen = [(e.task_id, e.kind) for e in by_group.events if isinstance(e, TaskEvent)]
    assert group_seen == [("ev-f-a", "start"), ("ev-f-a", "exit")]
    assert all(e.group == "ev-g1" for e in by_group.events if isinstance(e, TaskEvent))
    label_seen = [(e.task_id, e.kind) for e in by_label.events if isinstance(e, TaskEvent)]
    assert label_seen == [("ev-f-b", "start"), ("ev-f-b", "exit")]
    type_seen = [(e.task_id, e.kind) for e in by_type.events if isinstance(e, TaskEvent)]
    assert type_seen == [("ev-f-b", "exit"), ("ev-f-a", "exit")]
    assert by_type.exits["ev-f-a"].exit_code == by_type.exits["ev-f-b"].exit_code == 137
    for log in (by_group, by_label, by_type):
        assert log.errors == [] and log.missed == 0


def test_a_closed_client_ends_the_stream_instead_of_retrying(
    containerd_address: str, tmp_path: Path, test_image: str
) -> None:
    own = Client.connect(containerd_address, namespace=TEST_NAMESPACE)
    stream = Executor(own, log_dir=tmp_path / "logs").events()
    outcome: list[BaseException | None] = []

    def consume() -> None:
        try:
            for _ in stream:
                pass
        except Unavailable as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    own.close()
    consumer.join(timeout=30)
    assert not consumer.is_alive(), "the stream retried a closed client"
    assert len(outcome) == 1 and isinstance(outcome[0], Unavailable)
    assert "closed" in str(outcome[0])
