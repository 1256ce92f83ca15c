"""A scheduler's loop over ``Executor.events()``, as the event tests run it in a thread.

It does what docs/events.md asks of a caller: list the tasks once the stream is live
and again after every EventsMissed, and treat an exit the list already showed (same
task, same ``exited_at``) as the same exit. Anything else seen twice is a bug, kept in
``errors`` for the test to assert on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ctrexec.containerd.events import Event, EventsMissed, TaskEvent, TaskExited
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.tasks.events import TaskEvents
from ctrexec.tasks.executor import Executor
from ctrexec.testing import wait_for


class EventLog:
    """Consumes one stream on its own thread; ``exits`` maps a task to its one exit."""

    def __init__(self, ex: Executor, stream: TaskEvents, wanted: Callable[[str], bool]) -> None:
        self.ex = ex
        self.stream = stream
        self.wanted = wanted
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self.exits: dict[str, ExitStatus] = {}
        self.listed: set[str] = set()  # exits learnt by listing, not from an event
        self.missed = 0
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="test-eventlog", daemon=True)
        self._list()  # the stream is live: what happened before it is in the list
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.stream:
                with self.lock:
                    self.events.append(event)
                if isinstance(event, EventsMissed):
                    with self.lock:
                        self.missed += 1
                    self._list()
                elif isinstance(event, TaskExited):
                    self._exit(event.task_id, event.exit, listed=False)
        except Exception as exc:  # the test asserts on it
            self.errors.append(f"stream raised {exc!r}")

    def _list(self) -> None:
        for info in self.ex.list(all_tasks=True):
            if self.wanted(info.id) and info.status is Status.STOPPED and info.exit:
                self._exit(info.id, info.exit, listed=True)

    def _exit(self, task_id: str, status: ExitStatus, *, listed: bool) -> None:
        with self.lock:
            known = self.exits.get(task_id)
            if known is None:
                self.exits[task_id] = status
                if listed:
                    self.listed.add(task_id)
                return
            same = known.exited_at == status.exited_at and known.exit_code == status.exit_code
            if same and (listed or task_id in self.listed):
                return  # the list and the stream overlap: one exit
            self.errors.append(f"{task_id}: exit seen twice: {known} then {status}")

    def of(self, task_id: str) -> list[TaskEvent]:
        with self.lock:
            return [e for e in self.events if isinstance(e, TaskEvent) and e.task_id == task_id]

    def await_exits(self, ids: list[str], what: str, timeout: float = 60) -> None:
        wait_for(lambda: all(i in self.exits for i in ids), timeout=timeout, what=what)

    def await_kind(self, task_id: str, kind: str, timeout: float = 30) -> None:
        wait_for(
            lambda: any(e.kind == kind for e in self.of(task_id)),
            timeout=timeout,
            what=f"a {kind} event of {task_id}",
        )

    def close(self) -> None:
        self.stream.cancel()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the event stream did not end on cancel"
