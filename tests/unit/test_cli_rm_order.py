"""``rm -f a b``: every task is marked stopped by the user and sent SIGKILL before the
first removal starts (Executor.remove_many), so the removals that follow are quick and
a supervisor restarts none of them; ``ctrexec rm`` hands its words to that call and
reports each in turn.

The order is the library's own logic, so it is checked here on recording stand-ins: the
event stream of a real run cannot prove it (a task's exit event comes when its shim
reaps it, which under load may follow another task's delete).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import SimpleNamespace

import pytest

from ctrexec import labels as lbl
from ctrexec.cli import tasks as cli_tasks
from ctrexec.cli.main import main
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError, FailedPrecondition, NotFound
from ctrexec.tasks import control

pytestmark = pytest.mark.unit


class _Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._guard = threading.Lock()

    def note(self, what: str, task_id: str) -> None:
        with self._guard:
            self.calls.append((what, task_id))


class _Remover(control.Removing):
    """The Executor's remove_many over recorded destroys (each under its task's lock)."""

    def __init__(self, calls: _Calls, failing: str = "") -> None:
        self.client = SimpleNamespace(namespace="ns")  # type: ignore[assignment]
        self._calls, self._failing = calls, failing
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _destroy(self, task_id: str, **_kw: object) -> None:
        assert self._lock(task_id).locked()
        self._calls.note("destroy", task_id)
        if task_id == self._failing:
            raise FailedPrecondition(f"container {task_id} is running")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> _Calls:
    """Records the marks and kills kill_for_removal sends, over containers with a
    restart policy (a, b, c) or none (plain), every task running."""
    seen = _Calls()

    def get(_client: object, task_id: str) -> SimpleNamespace:
        labels = {} if task_id == "plain" else {lbl.RESTART_POLICY: "always"}
        return SimpleNamespace(id=task_id, labels=labels)

    def update_labels(_client: object, task_id: str, labels: Mapping[str, str | None]) -> None:
        assert labels[lbl.STOPPED_BY_USER] == "true"
        assert labels[lbl.RESTART_PENDING] is None
        seen.note("mark", task_id)

    def kill(_client: object, task_id: str, sig: int, **_kw: object) -> None:
        seen.note(f"kill {sig}", task_id)

    monkeypatch.setattr(
        control, "containers", SimpleNamespace(get=get, update_labels=update_labels)
    )
    monkeypatch.setattr(control, "tasks", SimpleNamespace(kill=kill))
    monkeypatch.setattr(control, "_status", lambda _c, _t: Status.RUNNING)
    return seen


def test_remove_many_forced_marks_and_kills_every_task_before_the_first_removal(
    calls: _Calls,
) -> None:
    results = _Remover(calls).remove_many(["a", "b", "c"], force=True)
    assert results == [("a", None), ("b", None), ("c", None)]
    first_destroy = calls.calls.index(("destroy", "a"))
    before = calls.calls[:first_destroy]
    assert sorted(before) == sorted([(what, t) for t in "abc" for what in ("mark", "kill 9")])
    for task_id in "abc":  # each one's mark before its kill: no exit unmarked
        assert before.index(("mark", task_id)) < before.index(("kill 9", task_id))
    assert calls.calls[first_destroy:] == [("destroy", "a"), ("destroy", "b"), ("destroy", "c")]


def test_remove_many_marks_only_tasks_with_a_policy_and_a_single_one_too(calls: _Calls) -> None:
    assert _Remover(calls).remove_many(["plain"], force=True) == [("plain", None)]
    assert calls.calls == [("kill 9", "plain"), ("destroy", "plain")]


def test_remove_many_reports_each_error_and_goes_on(calls: _Calls) -> None:
    results = _Remover(calls, failing="a").remove_many(["a", "b"])
    assert calls.calls == [("destroy", "a"), ("destroy", "b")]  # no force: no kill, no mark
    assert isinstance(results[0][1], FailedPrecondition)
    assert results[1] == ("b", None)


class _Executor:
    """What cmd_rm asks of the Executor, recorded."""

    client = None

    def __init__(self) -> None:
        self.asked: list[tuple[list[str], bool]] = []
        self.destroyed: list[str] = []

    def remove_many(
        self, ids: Sequence[str], *, force: bool = False, volumes: bool = False
    ) -> list[tuple[str, CtrexecError | None]]:
        self.asked.append((list(ids), force))
        return [(i, FailedPrecondition(f"{i} is running") if i == "bad" else None) for i in ids]

    def destroy(self, task_id: str, **_kw: object) -> None:
        self.destroyed.append(task_id)
        raise NotFound(f"No such container: {task_id}")


class _Lookup(containers.Lookup):
    """Every word names the container of that id, except ``gone``; ``named`` is the
    real one, on these answers."""

    def __call__(self, given: str) -> str:
        if given == "gone":
            raise NotFound(f"No such container: {given}")
        return given


def _resolver(client: object) -> _Lookup:
    return _Lookup(client)  # type: ignore[arg-type]


@pytest.mark.parametrize("force", [True, False])
def test_rm_hands_the_words_to_remove_many_and_reports_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], force: bool
) -> None:
    ex = _Executor()
    monkeypatch.setattr(cli_tasks, "executor", lambda _args: ex)
    monkeypatch.setattr(cli_tasks, "resolver", _resolver)
    words = ["a", "bad", "gone", "b", "a"]
    assert main(["rm", *(["-f"] if force else []), *words]) == 1
    assert ex.asked == [(["a", "bad", "b"], force)]  # once each, in order
    assert ex.destroyed == ["gone"]  # what a removal cut short left of it
    out, err = capsys.readouterr()
    assert out == "a\nb\n"
    assert "bad is running" in err
    assert err.count("No such container") == 2  # gone, and a named twice
