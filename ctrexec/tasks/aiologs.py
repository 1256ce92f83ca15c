"""A task's log as a blocking iterator that another thread can end: what
:class:`ctrexec.tasks.aio.Relay` turns into ``AsyncExecutor.logs``.

Following ends when the log is whole: the task's current run has exited (gRPC's exit
future, so no thread waits for it) and the log daemon has written all the task wrote
(:func:`ctrexec.tasks.output.settle`, the same step :meth:`Executor.wait` takes). Then
:func:`ctrexec.logs.reader.read_logs` reads once more and ends. ``cancel`` ends it the
same way, sooner.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Collection, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Self

from ctrexec.logs.reader import STREAMS, LogEntry, read_logs
from ctrexec.tasks import output as taskoutput

if TYPE_CHECKING:
    from ctrexec.containerd.tasks import ExitStatus
    from ctrexec.tasks.executor import Executor


class TaskLog:
    """The entries of one task's log, oldest first; see the module's docstring."""

    def __init__(self, entries: Iterator[LogEntry], done: threading.Event) -> None:
        self._entries = entries
        self._done = done
        self._exit: concurrent.futures.Future[ExitStatus] | None = None

    @classmethod
    def open(
        cls,
        executor: Executor,
        task_id: str,
        *,
        follow: bool = False,
        since: datetime | int | None = None,
        tail: int | None = None,
        streams: Collection[str] = STREAMS,
    ) -> TaskLog:
        """Read the record (NotFound for no container) and open its log; blocks for
        round trips, so the asyncio side calls it in a thread."""
        info = executor.inspect(task_id, addresses=False)
        done = threading.Event()
        entries = read_logs(
            info.log_path, driver=info.log_driver, follow=follow, since=since,
            tail=tail, streams=streams, stop=done.is_set, wait=done.wait,
        )  # fmt: skip
        log = cls(entries, done)
        if follow:
            log._exit = executor.wait_future(task_id)
            log._exit.add_done_callback(lambda future: log._exited(future, executor, task_id))
        return log

    def _exited(
        self, future: concurrent.futures.Future[ExitStatus], executor: Executor, task_id: str
    ) -> None:
        """On gRPC's thread, which must not block: the log's settling gets a thread of
        its own, bounded by settle's timeout, that ends the follow when it returns. A
        cancelled future (our ``cancel``) or no run to wait on (NotFound) ends it now."""
        if future.cancelled() or future.exception() is not None:
            self._done.set()
            return

        def settle() -> None:
            try:
                taskoutput.settle(executor.client, task_id, executor.state_dir)
            finally:
                self._done.set()

        threading.Thread(target=settle, name="ctrexec-aio-settle", daemon=True).start()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> LogEntry:
        return next(self._entries)

    def cancel(self) -> None:
        """End the read from another thread: it reads what is there once more, then stops."""
        self._done.set()
        if self._exit is not None:
            self._exit.cancel()
