"""each_at_once: every id acted on together, results in the ids' order; stop_and_destroy."""

from __future__ import annotations

import threading

import pytest

from ctrexec.errors import FailedPrecondition, NotFound
from ctrexec.tasks.teardown import each_at_once, stop_and_destroy


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
    """It needs no Executor: a stop that fails still destroys, every destroy is tried,
    and the first destroy error is raised after all of them."""
    barrier = threading.Barrier(2, timeout=30)  # both stops at once, or it breaks
    done: list[str] = []

    def stop(task_id: str) -> None:
        barrier.wait()
        if task_id == "a":
            raise FailedPrecondition("container a is paused")
        done.append(f"stop {task_id}")

    def destroy(task_id: str) -> None:
        done.append(f"destroy {task_id}")
        if task_id == "a":
            raise NotFound("No such container: a")

    with pytest.raises(NotFound):
        stop_and_destroy(["a", "b"], stop=stop, destroy=destroy)
    assert done == ["stop b", "destroy a", "destroy b"]
