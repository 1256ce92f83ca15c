"""each_at_once: every id acted on together, results in the ids' order; stop_all: every
stop signal before any wait, one stop timeout for any number of tasks; stop_and_destroy."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from ctrexec.errors import CtrexecError, DeadlineExceeded, FailedPrecondition, NotFound
from ctrexec.tasks import teardown
from ctrexec.tasks.teardown import each_at_once, stop_all, stop_and_destroy


def test_each_at_once_overlaps_and_keeps_order() -> None:
    barrier = threading.Barrier(3, timeout=30)  # passes only if all three run at once

    def act(task_id: str) -> None:
        barrier.wait()
        if task_id == "b":
            raise NotFound("No such container: b")

    results = each_at_once(["a", "b", "c"], act)
    assert [r[0] for r in results] == ["a", "b", "c"]
    assert results[0][1] is None and results[2][1] is None
    assert isinstance(results[1][1], NotFound)


def test_stop_and_destroy_takes_callables_stops_together_then_destroys_all() -> None:
    """It needs no Executor: one stop of them all, a stop that failed still destroys,
    every destroy is tried, and the first destroy error is raised after all of them."""
    done: list[str] = []

    def stop(ids: Sequence[str]) -> list[tuple[str, CtrexecError | None]]:
        done.append(f"stop {','.join(ids)}")
        return [("a", FailedPrecondition("container a is paused")), ("b", None)]

    def destroy(task_id: str) -> None:
        done.append(f"destroy {task_id}")
        if task_id == "a":
            raise NotFound("No such container: a")

    with pytest.raises(NotFound):
        stop_and_destroy(["a", "b"], stop=stop, destroy=destroy)
    assert done == ["stop a,b", "destroy a", "destroy b"]


class _Host:
    """A fake clock that only a wait moves, and a log of what every stop did when."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[tuple[str, str, float]] = []
        self.guard = threading.Lock()
        self.running = 0
        self.most_at_once = 0

    def clock(self) -> float:
        return self.now

    def record(self, what: str, task_id: str) -> None:
        with self.guard:
            self.log.append((what, task_id, self.now))

    def kinds(self, what: str) -> list[tuple[str, float]]:
        return [(task_id, at) for kind, task_id, at in self.log if kind == what]


class _Flight:
    """A task that exits at ``exits_at`` seconds after the start (never when None), or
    at once when SIGKILLed; ``fail`` names the step that raises."""

    def __init__(
        self, host: _Host, task_id: str, timeout: float, exits_at: float | None, fail: str
    ) -> None:
        self.host, self.task_id, self.timeout = host, task_id, timeout
        self.exits_at, self.fail, self.closed = exits_at, fail, False

    def wait(self, seconds: float) -> bool:
        self.host.record("wait", self.task_id)
        if self.exits_at is not None and self.exits_at <= self.host.now + seconds:
            self.host.now = max(self.host.now, self.exits_at)
            return True
        self.host.now += seconds
        return False

    def kill(self) -> None:
        self.host.record("kill", self.task_id)
        if self.fail == "kill":
            raise FailedPrecondition(f"kill of {self.task_id} refused")

    def finish(self, seconds: float) -> None:
        self.host.record("finish", self.task_id)
        if self.fail == "finish":
            raise DeadlineExceeded(f"{self.task_id}: no exit within {seconds}s")

    def close(self) -> None:
        self.closed = True


def _beginner(
    host: _Host, flights: dict[str, _Flight], spec: dict[str, tuple[float, float | None, str]]
) -> teardown.Callable[[str], teardown.InFlight]:
    barrier = threading.Barrier(teardown.MAX_THREADS, timeout=30)
    begun: list[str] = []

    def begin(task_id: str) -> teardown.InFlight:
        with host.guard:
            begun.append(task_id)
            first = len(begun) <= teardown.MAX_THREADS
            host.running += 1
            host.most_at_once = max(host.most_at_once, host.running)
        if first and len(spec) >= teardown.MAX_THREADS:
            barrier.wait()  # the first MAX_THREADS signals are sent at once
        with host.guard:
            host.running -= 1
        timeout, exits_at, fail = spec[task_id]
        if fail == "begin":
            raise NotFound(f"No such container: {task_id}")
        host.record("signal", task_id)
        flights[task_id] = _Flight(host, task_id, timeout, exits_at, fail)
        return flights[task_id]

    return begin


def test_stop_all_of_40_stubborn_tasks_sends_every_signal_first_and_kills_at_one_deadline() -> None:
    """40 tasks that ignore their stop signal (more than the threads a stop may use):
    every signal is sent before the first wait, every SIGKILL at the one deadline the
    2 s timeout sets, and only 2 s are waited in all, not one timeout per 32 tasks."""
    host, flights = _Host(), {}
    ids = [f"t{i:02}" for i in range(40)]
    begin = _beginner(host, flights, dict.fromkeys(ids, (2.0, None, "")))

    results = stop_all(ids, begin, kill_wait=10.0, clock=host.clock)

    assert results == [(task_id, None) for task_id in ids]
    kinds = [kind for kind, _task, _at in host.log]
    assert kinds[:40] == ["signal"] * 40 and "signal" not in kinds[40:]
    assert sorted(task for task, _at in host.kinds("kill")) == ids
    assert {at for _task, at in host.kinds("kill")} == {2.0}
    assert sorted(task for task, _at in host.kinds("finish")) == ids
    assert host.now == 2.0
    assert host.most_at_once == teardown.MAX_THREADS
    assert all(f.closed for f in flights.values())


def test_stop_all_kills_each_at_its_own_timeout_and_spares_those_that_exit() -> None:
    host, flights = _Host(), {}
    spec: dict[str, tuple[float, float | None, str]] = {
        "slow": (3.0, None, ""),  # ignores the signal: killed at 3
        "quick": (1.0, None, ""),  # ignores it too: killed at 1
        "polite": (5.0, 0.5, ""),  # exits on the signal
    }
    results = stop_all(list(spec), _beginner(host, flights, spec), kill_wait=10, clock=host.clock)

    assert results == [("slow", None), ("quick", None), ("polite", None)]
    assert host.kinds("kill") == [("quick", 1.0), ("slow", 3.0)]
    assert host.now == 3.0


def test_stop_all_reports_each_error_in_the_order_given_and_goes_on() -> None:
    host, flights = _Host(), {}
    spec: dict[str, tuple[float, float | None, str]] = {
        "gone": (1.0, None, "begin"),
        "deaf": (1.0, None, "kill"),
        "stuck": (1.0, None, "finish"),
        "fine": (1.0, None, ""),
    }
    results = stop_all(
        ["fine", "gone", "deaf", "stuck"], _beginner(host, flights, spec), kill_wait=10,
        clock=host.clock,
    )  # fmt: skip

    assert [task for task, _err in results] == ["fine", "gone", "deaf", "stuck"]
    errors = dict(results)
    assert errors["fine"] is None
    assert isinstance(errors["gone"], NotFound)
    assert isinstance(errors["deaf"], FailedPrecondition)
    assert isinstance(errors["stuck"], DeadlineExceeded)
    assert "deaf" not in [task for task, _at in host.kinds("finish")]
    assert all(f.closed for f in flights.values())
