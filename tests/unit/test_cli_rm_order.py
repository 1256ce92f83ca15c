"""``rm -f a b``: every task is sent SIGKILL before the first removal starts, so the
removals that follow are quick (each waits only for its own exit, already under way).

The order is the CLI's own logic, so it is checked here on a recording Executor: the
event stream of a real run cannot prove it (a task's exit event comes when its shim
reaps it, which under load may follow another task's delete).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ctrexec.cli import tasks as cli_tasks
from ctrexec.cli.main import main

pytestmark = pytest.mark.unit


def _resolver(_client: object) -> Callable[[str], str]:
    """Every word names the container of that id."""

    def resolve(word: str) -> str:
        return word

    resolve.known = list  # type: ignore[attr-defined]
    return resolve


class _Recording:
    """The Executor calls cmd_rm makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._guard = threading.Lock()

    def _note(self, what: str, task_id: str) -> None:
        with self._guard:
            self.calls.append((what, task_id))

    client = None

    def signal(self, task_id: str, sig: str) -> None:
        self._note(f"signal {sig}", task_id)

    def destroy(self, task_id: str, **_kw: object) -> None:
        self._note("destroy", task_id)


def test_rm_f_kills_every_task_before_the_first_removal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = _Recording()
    monkeypatch.setattr(cli_tasks, "executor", lambda _args: ex)
    monkeypatch.setattr(cli_tasks, "resolver", _resolver)
    assert main(["rm", "-f", "a", "b", "c"]) == 0
    assert capsys.readouterr().out == "a\nb\nc\n"
    first_destroy = ex.calls.index(("destroy", "a"))
    assert sorted(ex.calls[:first_destroy]) == [
        ("signal SIGKILL", "a"),
        ("signal SIGKILL", "b"),
        ("signal SIGKILL", "c"),
    ]
    assert ex.calls[first_destroy:] == [("destroy", "a"), ("destroy", "b"), ("destroy", "c")]


def test_rm_without_force_signals_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ex = _Recording()
    monkeypatch.setattr(cli_tasks, "executor", lambda _args: ex)
    monkeypatch.setattr(cli_tasks, "resolver", _resolver)
    assert main(["rm", "a", "b"]) == 0
    assert ex.calls == [("destroy", "a"), ("destroy", "b")]
    assert capsys.readouterr().out == "a\nb\n"
