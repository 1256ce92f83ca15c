"""Stopping several tasks at once, so a teardown takes the longest stop timeout, not the sum.

``group down`` of a task with a 5 s and one with a 10 s stop timeout, each ignoring its
stop signal, took 15 s when the stops ran one after the other; stopped together it
takes 10. Each stop runs in its own thread (an Executor may be used from several
threads; its per-task locks order what touches one task). Results come back in the
order of the ids given, so callers report them as if they had run in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ctrexec.errors import CtrexecError

#: Enough for a large group; each thread mostly waits for an exit.
MAX_THREADS = 32


def each_at_once(
    ids: Sequence[str], act: Callable[[str], object]
) -> list[tuple[str, CtrexecError | None]]:
    """Run ``act`` on every id concurrently; each id with the CtrexecError it raised, if any."""

    def run(task_id: str) -> CtrexecError | None:
        try:
            act(task_id)
        except CtrexecError as exc:
            return exc
        return None

    if len(ids) <= 1:
        return [(task_id, run(task_id)) for task_id in ids]
    with ThreadPoolExecutor(max_workers=min(len(ids), MAX_THREADS)) as pool:
        return list(zip(ids, pool.map(run, ids), strict=True))


def stop_and_destroy(
    ids: Sequence[str], *, stop: Callable[[str], object], destroy: Callable[[str], object]
) -> None:
    """``stop`` all the tasks together (a stop that fails still destroys), then
    ``destroy`` them one by one: the tasks of a group share a shim, whose end one
    removal may decide. The first error of a destroy is raised once all were tried."""
    each_at_once(ids, stop)  # each one's error is dropped: the destroy reports
    errors = []
    for task_id in ids:
        try:
            destroy(task_id)
        except CtrexecError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
