"""Restart policies, applied by a small long-running watcher (``ctrexec supervise``).

The supervisor keeps no state of its own: the policy, the restart count and the
"stopped by user" mark are container labels. It listens to task-exit events and, on
start and after every reconnect, lists all tasks again (events are not durable), so
killing it and starting it again loses nothing.
"""

from __future__ import annotations

import logging
import threading

from ctrexec import containers, tasks
from ctrexec import labels as lbl
from ctrexec.errors import CtrexecError, NotFound, Unavailable
from ctrexec.events import EventStream, TaskExitEvent
from ctrexec.executor import Executor
from ctrexec.tasks import ExitStatus, Status

log = logging.getLogger("ctrexec.supervisor")
#: How often the stop watcher checks that run() is still going (only then: a set
#: ``stop`` wakes it at once).
STOP_POLL = 0.5


def should_restart(labels: dict[str, str], exit_code: int) -> bool:
    """The policy decision for one exit, from the container's labels alone."""
    policy = labels.get(lbl.RESTART_POLICY, "no")
    if policy == "no" or labels.get(lbl.STOPPED_BY_USER) == "true":
        return False
    if policy == "on-failure" and exit_code == 0:
        return False
    max_attempts = int(labels.get(lbl.RESTART_MAX, "0") or 0)
    count = int(labels.get(lbl.RESTART_COUNT, "0") or 0)
    return not (max_attempts > 0 and count >= max_attempts)


class Supervisor:
    """Watches one namespace and restarts tasks by their restart policy."""

    def __init__(self, executor: Executor, *, reconnect_delay: float = 1.0) -> None:
        self.executor = executor
        self.client = executor.client
        self.reconnect_delay = reconnect_delay
        self._guard = threading.Lock()
        #: One timer per container waiting for its restart; also the "pending" set.
        self._timers: dict[str, threading.Timer] = {}
        self._stream: EventStream | None = None
        self._restarts = 0

    @property
    def restarts(self) -> int:
        """How many restarts this supervisor made (timer threads update it)."""
        with self._guard:
            return self._restarts

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; survives containerd restarts by reconnecting.

        One watcher thread for the whole run turns ``stop`` into a cancel of whichever
        stream is current, so reconnecting starts no thread; pending restart timers
        are cancelled on the way out, so nothing restarts a task after ``run`` returns.
        """
        done = threading.Event()
        watcher = threading.Thread(
            target=self._cancel_on_stop, args=(stop, done), name="ctrexec-supervise-stop"
        )
        watcher.daemon = True
        watcher.start()
        try:
            while not stop.is_set():
                self._serve(stop)
                stop.wait(self.reconnect_delay)
        finally:
            done.set()
            watcher.join()
            self._cancel_timers()

    def _cancel_on_stop(self, stop: threading.Event, done: threading.Event) -> None:
        # Polls ``done`` too, so a run() that raised does not leave this thread behind.
        while not done.is_set():
            if stop.wait(STOP_POLL):
                with self._guard:
                    stream = self._stream
                if stream is not None:
                    stream.cancel()
                return

    def _serve(self, stop: threading.Event) -> None:
        """One subscription: reconcile, then act on events until the stream ends."""
        try:
            stream = EventStream(self.client)
        except CtrexecError as exc:
            log.warning("cannot subscribe to events: %s", exc)
            return
        with self._guard:
            self._stream = stream
        try:
            if stop.is_set():  # set before the watcher could see this stream
                return
            self.reconcile()
            for event in stream:
                if isinstance(event, TaskExitEvent) and event.is_init:
                    self._on_exit(event.container_id, event.exit)
        except Unavailable as exc:
            log.warning("lost containerd, reconnecting: %s", exc)
        except CtrexecError as exc:
            if not stop.is_set():
                log.warning("event stream ended: %s", exc)
        finally:
            with self._guard:
                self._stream = None
            stream.cancel()

    def _cancel_timers(self) -> None:
        with self._guard:
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()
        for timer in timers:
            timer.join()

    def reconcile(self) -> None:
        """Apply the policy to every stopped task, for exits missed while away."""
        for info in self.executor.list(all_tasks=True):
            if info.status is Status.STOPPED and info.exit is not None:
                self._on_exit(info.id, info.exit)

    def _on_exit(self, container_id: str, status: ExitStatus) -> None:
        try:
            record = containers.get(self.client, container_id)
        except NotFound:
            return
        labels = dict(record.labels)
        if labels.get(lbl.MANAGED) != "true" or not should_restart(labels, status.code):
            return
        delay = float(labels.get(lbl.RESTART_DELAY, "1") or 1)
        with self._guard:
            if container_id in self._timers:
                return
            timer = threading.Timer(delay, self._restart, args=(container_id,))
            timer.daemon = True
            self._timers[container_id] = timer
            timer.start()

    def _restart(self, container_id: str) -> None:
        try:
            record = containers.get(self.client, container_id)
            state = tasks.find(self.client, container_id)
            labels = dict(record.labels)
            code = state.exit.code if state and state.exit else 0
            if state is not None and state.status is not Status.STOPPED:
                return  # someone started it meanwhile
            if not should_restart(labels, code):
                return
            count = int(labels.get(lbl.RESTART_COUNT, "0") or 0) + 1
            containers.update_labels(self.client, container_id, {lbl.RESTART_COUNT: str(count)})
            self.executor.start(container_id, by_policy=True)
            with self._guard:
                self._restarts += 1
            log.info("restarted %s (attempt %d)", container_id, count)
        except NotFound:
            pass
        except CtrexecError as exc:
            log.warning("restart of %s failed: %s", container_id, exc)
        finally:
            with self._guard:
                self._timers.pop(container_id, None)


def serve(executor: Executor, stop: threading.Event | None = None) -> None:
    """Run a supervisor in this thread until ``stop`` (or forever)."""
    Supervisor(executor).run(stop or threading.Event())
