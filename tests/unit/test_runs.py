"""Runs in labels: numbering, the replaced run's exit, and which run a handle names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import HandleMismatch, InvalidArgument
from ctrexec.tasks import runs
from ctrexec.tasks.reports import TaskHandle, TaskInfo

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _apply(labels: dict[str, str], update: dict[str, str | None]) -> dict[str, str]:
    """What containerd's label update does: set the values, remove the Nones."""
    out = {**labels, **{k: v for k, v in update.items() if v is not None}}
    return {k: v for k, v in out.items() if update.get(k, "") is not None}


def test_a_restart_keeps_the_replaced_runs_exit() -> None:
    labels = runs.first_run(T0)
    assert runs.current(labels) == runs.Run(run=1, started_at=T0)
    died = ExitStatus(exit_code=137, exited_at=T0 + timedelta(seconds=5), oom_killed=True)
    labels = _apply(
        labels,
        runs.next_run(
            labels, started_at=T0 + timedelta(seconds=6), replaced_pid=42, replaced_exit=died
        ),
    )
    assert runs.current(labels) == runs.Run(run=2, started_at=T0 + timedelta(seconds=6))
    assert runs.previous(labels) == runs.Run(run=1, pid=42, started_at=T0, exit=died)
    assert runs.kept_exit(labels) is None  # the current run's exit is its task's


def test_a_failed_start_is_undone_and_the_exit_stays_the_current_runs() -> None:
    before = runs.first_run(T0)
    died = ExitStatus(exit_code=3, exited_at=T0)
    after = _apply(before, runs.next_run(before, started_at=T0, replaced_pid=7, replaced_exit=died))
    undone = _apply(after, runs.undo_next_run(before))
    assert runs.current(undone) == runs.Run(run=1, started_at=T0)
    assert runs.kept_exit(undone) == died
    # The next start that succeeds numbers run 2 and keeps that exit for run 1.
    again = _apply(undone, runs.next_run(undone, started_at=T0, replaced_pid=0, replaced_exit=None))
    assert runs.previous(again) == runs.Run(run=1, pid=7, started_at=T0, exit=died)
    assert runs.current(again) is not None and runs.current(again).run == 2  # type: ignore[union-attr]


def test_a_record_from_before_runs_were_numbered() -> None:
    """No run labels: the first start numbers run 1 and keeps the old exit as run 0."""
    died = ExitStatus(exit_code=1, exited_at=T0)
    labels = _apply({}, runs.next_run({}, started_at=T0, replaced_pid=9, replaced_exit=died))
    assert runs.current(labels) == runs.Run(run=1, started_at=T0)
    assert runs.previous(labels) == runs.Run(run=0, pid=9, exit=died)
    # A version 1 handle (run 0) of that task finds its exit by its pid.
    match = runs.locate(0, 9, labels, task_pid=10)
    assert match.newer == 1 and match.run == runs.Run(run=0, pid=9, exit=died)
    assert runs.locate(0, 10, labels, task_pid=10) == runs.Match(run=None, newer=None)


def test_locate() -> None:
    labels = runs.first_run(T0)
    assert runs.locate(1, 5, labels, task_pid=5) == runs.Match(run=None, newer=None)
    with pytest.raises(HandleMismatch):
        runs.locate(2, 5, labels, task_pid=5)
    died = ExitStatus(exit_code=0, exited_at=T0)
    two = _apply(labels, runs.next_run(labels, started_at=T0, replaced_pid=5, replaced_exit=died))
    assert runs.locate(1, 5, two, task_pid=6).run == runs.Run(
        run=1, pid=5, started_at=T0, exit=died
    )
    three = _apply(two, runs.next_run(two, started_at=T0, replaced_pid=6, replaced_exit=died))
    # Two runs back: superseded, its exit no longer kept.
    assert runs.locate(1, 5, three, task_pid=None) == runs.Match(
        run=runs.Run(run=1, pid=5), newer=3
    )
    # Never numbered (made by create, never started since): the task is the handle's.
    assert runs.locate(1, 5, {}, task_pid=None) == runs.Match(run=None, newer=None)


@pytest.mark.parametrize("bad", ["", "x", "{", "[1]", '{"pid": 3}', '{"run": "a"}'])
def test_a_broken_previous_label_is_unknown_not_an_error(bad: str) -> None:
    assert runs.previous({**runs.first_run(T0), lbl.RUN_PREVIOUS: bad}) is None


def test_same_address() -> None:
    assert runs.same_address("unix:///run/x/../x/c.sock", "/run/x/c.sock")
    assert not runs.same_address("/run/a.sock", "/run/b.sock")


def test_handle_json_round_trip_and_version_1() -> None:
    handle = TaskHandle(
        id="web",
        namespace="ns",
        address="/run/c.sock",
        pid=4,
        started_at=T0,
        netns_path=None,
        log_path="/l/task.log",
        run=3,
        container_created_at=T0,
    )
    assert TaskHandle.from_json(handle.to_json()) == handle
    v1 = {k: v for k, v in handle.to_json().items() if k not in ("run", "container_created_at")}
    old = TaskHandle.from_json({**v1, "version": 1})
    assert old.run == 0 and old.container_created_at is None and old.version == 1
    with pytest.raises(InvalidArgument):
        TaskHandle.from_json({**v1, "container_created_at": "yesterday"})


def test_info_json_says_the_run_and_its_end() -> None:
    ended = ExitStatus(exit_code=137, exited_at=T0, oom_killed=True)
    info = TaskInfo(
        id="web",
        image="img",
        status=Status.STOPPED,
        pid=4,
        exit=ended,
        netns_path=None,
        netns_mode="none",
        group=None,
        log_path="",
        labels={},
        created_at=None,
        config=None,
        run=1,
        started_at=T0 - timedelta(seconds=1),
        newer_run=2,
    )
    data = info.to_json()
    assert info.superseded and info.exit_code == 137 and info.finished_at == T0
    assert (data["run"], data["newer_run"], data["exit_code"], data["oom_killed"]) == (
        1,
        2,
        137,
        True,
    )
    assert data["finished_at"] == T0.isoformat() and data["addresses"] is None


def test_group_ports_label_round_trip() -> None:
    from ctrexec.tasks import info as taskinfo

    labels = {lbl.GROUP_PORTS: "8080:80/tcp,127.0.0.1:53:53/udp,[::1]:9000:90,bad"}
    ports = taskinfo.group_ports(labels)
    assert [(p.host_ip, p.host_port, p.container_port, p.protocol) for p in ports] == [
        ("", 8080, 80, "tcp"),
        ("127.0.0.1", 53, 53, "udp"),
        ("::1", 9000, 90, "tcp"),
    ]
    assert taskinfo.group_ports({}) == ()
