"""A task whose shim does not answer: "state unknown", never "no task" or "exited".

Fakes of the connection only: what containerd answers on each version is in
tests/chaos/test_slow_shim.py, against a real shim stopped with SIGSTOP.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import attrs
import pytest

from ctrexec import _rpc, defaults, errors
from ctrexec import labels as lbl
from ctrexec._api.containerd.services.tasks.v1 import tasks_pb2
from ctrexec._api.containerd.types.task import task_pb2
from ctrexec.cli.views import inspect as inspectview
from ctrexec.cli.views import ps as psview
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ProcessState, Status
from ctrexec.groups.supervisor import Supervisor, lost_reason
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.reports import TaskInfo

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class _Answer:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def result(self, timeout: float | None = None) -> Any:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class _Conn:
    """Answers List with ``listed`` and each Get from ``gets`` (a response or an error)."""

    def __init__(self, listed: list[task_pb2.Process], gets: dict[str, Any]) -> None:
        self.listed = listed
        self.gets = gets
        self.calls: list[tuple[str, str, float | None]] = []

    def unary(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        self.calls.append((method, getattr(request, "container_id", ""), kw.get("timeout")))
        if method == "List":
            return tasks_pb2.ListTasksResponse(tasks=self.listed)
        return self._get(request.container_id).result()

    def unary_future(self, service: str, method: str, request: Any, rt: Any, **kw: Any) -> Any:
        assert method == "Get"
        self.calls.append((method, request.container_id, kw.get("timeout")))
        return self._get(request.container_id)

    def _get(self, cid: str) -> _Answer:
        found = self.gets.get(cid, errors.NotFound(f"task {cid}: not found"))
        if isinstance(found, Exception):
            return _Answer(found)
        return _Answer(tasks_pb2.GetResponse(process=found))


def _client(listed: list[task_pb2.Process], gets: dict[str, Any] | None = None) -> Client:
    return Client(cast(_rpc.Connection, _Conn(listed, gets or {})), namespace="ns")


def _calls(client: Client) -> list[tuple[str, str, float | None]]:
    return cast(_Conn, client._connection).calls


def _running(cid: str, pid: int = 42) -> task_pb2.Process:
    return task_pb2.Process(id=cid, pid=pid, status=task_pb2.RUNNING)


SLOW = errors.DeadlineExceeded("Tasks.Get: context deadline exceeded")


def test_when_list_has_every_id_it_is_the_one_call() -> None:
    client = _client([_running("a"), _running("b")])
    states = tasks.states_of(client, ["a", "b"])
    assert {cid: s.status for cid, s in states.items()} == {
        "a": Status.RUNNING,
        "b": Status.RUNNING,
    }
    assert [m for m, _, _ in _calls(client)] == ["List"]


def test_an_id_list_left_out_is_asked_for_and_a_silent_shim_is_unknown() -> None:
    # containerd 2.3: List leaves out a task whose shim is slow, Get times out on it.
    client = _client([_running("a")], {"slow": SLOW, "back": _running("back", 7)})
    states = tasks.states_of(client, ["a", "slow", "none", "back"])
    assert states["a"].status is Status.RUNNING
    assert "none" not in states  # a record with no task: NotFound, no shim asked
    assert states["back"].status is Status.RUNNING and states["back"].pid == 7
    slow = states["slow"]
    assert slow.unknown and slow.pid == 0 and slow.exit is None
    assert slow.reason is not None and tasks.SHIM_SILENT in slow.reason
    gets = [(cid, t) for m, cid, t in _calls(client) if m == "Get"]
    assert gets == [(c, defaults.TASK_STATE_TIMEOUT) for c in ("slow", "none", "back")]


def test_an_unknown_status_from_list_says_why() -> None:
    # containerd up to 2.1: List and Get answer UNKNOWN, pid 0, once its 2 s are up.
    client = _client([task_pb2.Process(id="slow", status=task_pb2.UNKNOWN)])
    (state,) = tasks.list_tasks(client)
    assert state.unknown and state.reason == tasks.SHIM_SILENT


def test_find_is_bounded_and_tells_unknown_from_no_task() -> None:
    client = _client([], {"slow": SLOW})
    state = tasks.find(client, "slow")
    assert state is not None and state.unknown and state.status is Status.UNKNOWN
    assert tasks.find(client, "none") is None
    assert {t for _, _, t in _calls(client)} == {defaults.TASK_STATE_TIMEOUT}


def test_a_list_that_times_out_says_why() -> None:
    conn = _Conn([], {})
    conn.unary = lambda *a, **kw: (_ for _ in ()).throw(SLOW)  # type: ignore[method-assign]
    client = Client(cast(_rpc.Connection, conn), namespace="ns")
    with pytest.raises(errors.DeadlineExceeded, match="a shim is not answering"):
        tasks.list_tasks(client)


def _record(labels: dict[str, str] | None = None) -> containers.Container:
    return containers.Container(
        id="web",
        image="img",
        labels={lbl.MANAGED: "true", **(labels or {})},
        spec={},
        snapshot_key="web",
        snapshotter="overlayfs",
        runtime=containers.Runtime(name="io.containerd.runc.v2"),
        created_at=NOW,
        extensions={},
    )


def _unknown_info() -> TaskInfo:
    state = tasks.unknown_state("web", f"{tasks.SHIM_SILENT} (Tasks.Get: deadline)")
    return taskinfo.build(_record(), state)


def test_an_unknown_task_is_neither_created_nor_exited() -> None:
    info = _unknown_info()
    assert info.status is Status.UNKNOWN and info.exit is None
    assert info.unknown_reason is not None and "Tasks.Get" in info.unknown_reason
    assert info.to_json()["unknown_reason"] == info.unknown_reason
    # Not a run that went with no exit seen: nothing revives it.
    started = attrs.evolve(info, started_at=NOW - timedelta(hours=1))
    assert lost_reason(started, NOW - timedelta(days=1), NOW) is None


def test_ps_and_inspect_say_unknown() -> None:
    info = _unknown_info()
    assert psview.state(info) == "unknown"
    assert psview.status_text(info, NOW) == "Unknown (shim not answering)"
    assert psview.matches(info, {"status": ["unknown"]})
    state = inspectview.state_of(info)
    assert state["Status"] == "unknown" and state["Running"] is True and state["Pid"] == 0
    assert state["Error"].startswith("state unknown: its shim did not answer")


class _Executor:
    """What the supervisor asks of an executor: the task is silent, then answers."""

    def __init__(self, client: Client, answers: list[TaskInfo]) -> None:
        self.client = client
        self.answers = answers
        self.started: list[str] = []
        self.asked = threading.Event()

    def list(self, *, all_tasks: bool = False) -> list[TaskInfo]:
        return [self.answers[0]]

    def inspect(self, task_id: str, *, addresses: bool = True) -> TaskInfo:
        if len(self.answers) > 1:
            self.answers.pop(0)
        self.asked.set()
        return self.answers[0]

    def start(self, task_id: str, **kw: Any) -> None:
        self.started.append(task_id)


def _until(predicate: Any, timeout: float = 10.0) -> None:
    """Wait, bounded, for what the supervisor's timer threads do."""
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        done.wait(0.02)
    raise AssertionError("gave up waiting")


def _config() -> TaskConfig:
    return TaskConfig(name="web", image="img")


def test_the_supervisor_leaves_a_silent_task_alone_and_asks_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    silent = attrs.evolve(
        _unknown_info(),
        labels={lbl.RESTART_POLICY: "always"},
        started_at=NOW - timedelta(hours=1),
        config=_config(),
    )
    back = attrs.evolve(silent, status=Status.RUNNING, pid=42, unknown_reason=None)
    ex = _Executor(_client([]), [silent, silent, back])
    sup = Supervisor(cast(Executor, ex), recheck_silent=0.01, boot_time=lambda: 0.0)
    caplog.set_level(logging.INFO, logger="ctrexec.groups.supervisor")
    sup.reconcile()
    assert ex.asked.wait(10), "the supervisor never asked again"
    _until(lambda: any("answered again" in r.getMessage() for r in caplog.records))
    lines = [r.getMessage() for r in caplog.records]
    assert ex.started == []
    unread = [m for m in lines if "could not be read" in m]
    assert len(unread) == 1, lines  # said once, however often it is asked
    assert "it was left as it is, not restarted" in unread[0]
    assert "web: its shim answered again; its task is running" in lines
    assert sup.pending == set()


def test_state_reason_is_only_for_unknown() -> None:
    state = ProcessState("a", "", 1, Status.RUNNING, None)
    assert not state.unknown and state.reason is None


def test_inspect_never_pairs_a_record_with_a_later_runs_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The record is read (run 4), then a restart numbers run 5 and makes its task
    # (not started yet), then the task is read: that pair said run 4 was never started.
    run4 = _record({lbl.RUN_ID: "4", lbl.RESTART_COUNT: "3"})
    run5 = _record({lbl.RUN_ID: "5", lbl.RESTART_COUNT: "3"})
    made = ProcessState("web", "", 0, Status.CREATED, None)
    records = iter([run4, run5, run5])
    found = iter([made, made])
    monkeypatch.setattr(containers, "get", lambda client, task_id: next(records))
    monkeypatch.setattr(tasks, "find", lambda client, task_id: next(found))
    record, state = taskinfo._read_together(cast(Client, None), "web")
    assert (record.labels[lbl.RUN_ID], state) == ("5", made)
    assert next(records, None) is None  # read again until the record held still
