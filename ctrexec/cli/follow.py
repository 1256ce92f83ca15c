"""Following a task's output in its log until it exits: ``run`` without ``-d`` or
``-i/-t``, ``start -a`` of such a task, and ``attach`` to one (docker streams their
output from the container's stdio; ctrexec's is in the log, which the log driver
copies, so the task never blocks on an attached client).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ctrexec import CtrexecError

if TYPE_CHECKING:
    from ctrexec import Executor, ExitStatus, LogEntry


def attached_entries(
    driver: str,
    log_path: str,
    stop: Callable[[], bool],
    exited: Callable[[], bool] | None = None,
    *,
    tail: int | None = None,
    wait: Callable[[float], object] = time.sleep,
) -> Iterator[LogEntry]:
    """What an attached run prints: the log as it grows (``tail=0``: only what comes
    from now on) until ``stop()``, or until the task has ``exited()`` and its log is
    whole (see :func:`ctrexec.read_logs`); with no log (driver ``none``), nothing until
    either. ``wait`` pauses between polls."""
    if driver != "none":  # the one driver that keeps nothing (read_logs refuses it)
        from ctrexec import read_logs

        yield from read_logs(
            log_path, driver=driver, follow=True, stop=stop, exited=exited, poll_interval=0.01,
            tail=tail, wait=wait,
        )  # fmt: skip
        return
    while not (stop() or (exited is not None and exited())):
        wait(0.05)


def stream_until_exit(
    ex: Executor,
    task_id: str,
    log_path: str,
    driver: str,
    *,
    reap: bool = False,
    tail: int | None = None,
    exit_future: Future[ExitStatus] | None = None,
) -> int:
    """Print the task's log as it grows (``tail=0``, ``attach``: only what comes from now
    on); return the exit code once the task ends. SIGINT and SIGTERM go to the task.

    ``reap`` (``run --rm``): the task is deleted at its exit, which ends the log at once;
    otherwise the stopped task stays and its log is read until whole. ``exit_future``: the
    exit's future armed before the start (``Executor.start_watched``): the supervisor
    may delete an ``--rm`` task before a wait begun now would find it.
    """
    exit_future = exit_future or _exit_of(ex, task_id)
    done = threading.Event()
    exit_future.add_done_callback(lambda _f: done.set())  # on gRPC's thread: no block
    stop = stop_after_reap(ex, task_id, done.is_set) if reap else lambda: False
    exited = None if reap else done.is_set
    # The handler only records the signal: an RPC there could deadlock on a lock the
    # interrupted code holds. The read loop forwards it at its next poll.
    received: list[int] = []

    def forward_pending() -> None:
        while received:
            with contextlib.suppress(CtrexecError):  # the task may have exited meanwhile
                ex.signal(task_id, received.pop(0))

    def forward_then_stop() -> bool:
        forward_pending()
        return stop()

    pause = _pause_until(done)
    entries = attached_entries(driver, log_path, forward_then_stop, exited, tail=tail, wait=pause)
    record = lambda signum, _frame: received.append(signum)  # noqa: E731
    old = {s: signal.signal(s, record) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for entry in entries:
            forward_pending()
            out = sys.stderr if entry.stderr else sys.stdout
            out.write(entry.message)
            out.flush()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return exit_future.result().exit_code


def _exit_of(ex: Executor, task_id: str) -> Future[ExitStatus]:
    """The exit as ``Executor.wait`` gives it (a kept one too, and the log settled),
    waited for in a thread."""
    future: Future[ExitStatus] = Future()

    def wait() -> None:
        try:
            future.set_result(ex.wait(task_id))
        except CtrexecError as exc:
            future.set_exception(exc)

    threading.Thread(target=wait, daemon=True).start()
    return future


def _pause_until(exited: threading.Event) -> Callable[[float], object]:
    """A poll's pause that the exit cuts short: the command ends when its task does,
    not up to a poll later. Once exited, a plain sleep (the settle's polls)."""

    def pause(seconds: float) -> None:
        if exited.is_set():
            time.sleep(seconds)
        else:
            exited.wait(seconds)

    return pause


def stop_after_reap(ex: Executor, task_id: str, exited: Callable[[], bool]) -> Callable[[], bool]:
    """A ``stop`` for read_logs: true once the exited task was deleted, so its log is whole."""
    reaped: list[bool] = []

    def stop() -> bool:
        if not reaped and exited():
            with contextlib.suppress(CtrexecError):  # destroy, after, does it all again
                ex.reap(task_id)
            reaped.append(True)
        return bool(reaped)

    return stop
