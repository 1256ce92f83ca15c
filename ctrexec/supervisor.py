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
        self._pending: set[str] = set()
        self._guard = threading.Lock()
        self.restarts = 0

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; survives containerd restarts by reconnecting."""
        while not stop.is_set():
            try:
                stream = EventStream(self.client)
            except CtrexecError as exc:
                log.warning("cannot subscribe to events: %s", exc)
                stop.wait(self.reconnect_delay)
                continue
            watcher = threading.Thread(target=lambda s=stream: (stop.wait(), s.cancel()))
            watcher.daemon = True
            watcher.start()
            try:
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
                stream.cancel()
            stop.wait(self.reconnect_delay)

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
        with self._guard:
            if container_id in self._pending:
                return
            self._pending.add(container_id)
        delay = float(labels.get(lbl.RESTART_DELAY, "1") or 1)
        timer = threading.Timer(delay, self._restart, args=(container_id,))
        timer.daemon = True
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
            self.restarts += 1
            log.info("restarted %s (attempt %d)", container_id, count)
        except NotFound:
            pass
        except CtrexecError as exc:
            log.warning("restart of %s failed: %s", container_id, exc)
        finally:
            with self._guard:
                self._pending.discard(container_id)


def serve(executor: Executor, stop: threading.Event | None = None) -> None:
    """Run a supervisor in this thread until ``stop`` (or forever)."""
    Supervisor(executor).run(stop or threading.Event())
