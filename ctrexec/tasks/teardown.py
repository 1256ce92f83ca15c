"""Stopping several tasks at once, so a teardown takes the longest stop timeout, not the sum.

``group down`` of a task with a 5 s and one with a 10 s stop timeout, each ignoring its
stop signal, took 15 s when the stops ran one after the other; stopped together it
takes 10. Run as one thread per stop from a pool of 32, it still took two timeouts past
32 tasks (22.8 s for 50 with a 10 s timeout): the 33rd stop began only when a thread of
the first 32 was free. So a stop of many is cut in phases (:func:`stop_all`): every stop
signal is sent first (a few fast RPCs each, bounded threads), then one thread waits for
the exits, each against its own deadline counted from its signal, and SIGKILLs at that
deadline whatever is still running; the Waits were armed before the signals and are
answered by gRPC's own threads, so waiting costs no thread per task. Results come back
in the order of the ids given, so callers report them as if they had run in turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Protocol

from ctrexec.errors import CtrexecError

#: Enough for a large group; each thread sends a few RPCs or waits for one exit.
MAX_THREADS = 32


class InFlight(Protocol):
    """A stop whose signal was sent (control.StopInFlight), seen by :func:`stop_all`."""

    #: Seconds its stop signal is given before SIGKILL.
    timeout: float

    def wait(self, seconds: float) -> bool:
        """True once the task has exited (at once without a task to wait for)."""
        ...

    def kill(self) -> None: ...

    def finish(self, seconds: float) -> None:
        """Wait for the exit a SIGKILL brings; DeadlineExceeded if none within ``seconds``."""
        ...

    def close(self) -> None: ...


def each_at_once(
    ids: Sequence[str], act: Callable[[str], object]
) -> list[tuple[str, CtrexecError | None]]:
    """Run ``act`` on every id concurrently; each id with the CtrexecError it raised, if any."""

    def run(task_id: str) -> CtrexecError | None:
        return _caught(lambda: act(task_id))

    if len(ids) <= 1:
        return [(task_id, run(task_id)) for task_id in ids]
    with ThreadPoolExecutor(max_workers=min(len(ids), MAX_THREADS)) as pool:
        return list(zip(ids, pool.map(run, ids), strict=True))


def stop_all(
    ids: Sequence[str],
    begin: Callable[[str], InFlight],
    *,
    kill_wait: float,
    clock: Callable[[], float] = time.monotonic,
) -> list[tuple[str, CtrexecError | None]]:
    """Stop every task in one stop timeout, whatever their number; each id with the
    CtrexecError its stop raised, if any. ``begin`` sends one task its stop signal;
    ``kill_wait`` bounds the wait for the exits SIGKILL brings, all counted from the
    last kill."""
    errors: dict[str, CtrexecError] = {}
    started: dict[str, tuple[float, InFlight]] = {}

    def signal(task_id: str) -> CtrexecError | None:
        def send() -> None:
            flight = begin(task_id)
            started[task_id] = (clock() + flight.timeout, flight)

        return _caught(send)

    def note(task_id: str, error: CtrexecError | None) -> None:
        if error is not None:
            errors[task_id] = error

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(len(ids), MAX_THREADS))) as pool:
            unique = list(dict.fromkeys(ids))  # one stop per task, however often named
            for task_id, error in zip(unique, pool.map(signal, unique), strict=True):
                note(task_id, error)
            late: list[str] = []  # past their deadline, not yet SIGKILLed
            killed: list[str] = []

            def kill_late() -> None:
                kills = pool.map(lambda i: _caught(started[i][1].kill), late)
                for task_id, error in zip(late, kills, strict=True):
                    note(task_id, error)
                killed.extend(late)
                late.clear()

            for task_id, (deadline, flight) in sorted(started.items(), key=lambda s: s[1][0]):
                if late and deadline > clock():  # kill those due before waiting on
                    kill_late()
                try:
                    if not flight.wait(max(0.0, deadline - clock())):
                        late.append(task_id)
                except CtrexecError as failed:
                    note(task_id, failed)
            kill_late()
        until = clock() + kill_wait
        for task_id in killed:
            if task_id not in errors:
                finish = partial(started[task_id][1].finish, max(0.0, until - clock()))
                note(task_id, _caught(finish))
    finally:
        for _deadline, flight in started.values():
            flight.close()
    return [(task_id, errors.get(task_id)) for task_id in ids]


def stop_and_destroy(
    ids: Sequence[str],
    *,
    stop: Callable[[Sequence[str]], object],
    destroy: Callable[[str], object],
) -> None:
    """``stop`` all the tasks together (a stop that fails still destroys), then
    ``destroy`` them one by one: the tasks of a group share a shim, whose end one
    removal may decide. The first error of a destroy is raised once all were tried."""
    stop(ids)  # each one's error is dropped: the destroy reports
    errors = []
    for task_id in ids:
        try:
            destroy(task_id)
        except CtrexecError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _caught(act: Callable[[], object]) -> CtrexecError | None:
    try:
        act()
    except CtrexecError as exc:
        return exc
    return None
