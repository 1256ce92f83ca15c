"""each_at_once: every id acted on together, results in the ids' order."""

from __future__ import annotations

import threading

from ctrexec.errors import NotFound
from ctrexec.tasks.teardown import each_at_once


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
