"""Restart policies, applied by a small long-running watcher (``ctrexec supervise``).

The supervisor keeps no state of its own: the policy, the restart count, the backoff,
the "stopped by user" mark, a restart pending and why the last one failed are
container labels, each written once what it says is so. It is built on
:meth:`Executor.events`, as a scheduler would be: it lists all tasks once the stream is
live, acts on each exit event, and lists again whenever the stream says events were
missed (containerd restarted), so killing it and starting it again loses nothing.

It also removes ``--rm`` containers whose task exited (docker's daemon does that;
ctrexec has no daemon). While it runs it holds a shared lock on a file named after
the containerd address and namespace, so ``run -d --rm`` can tell whether any
supervisor will remove the container (:mod:`ctrexec.groups.presence`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from ctrexec import _linux
from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.events import EventsMissed, TaskExited, TaskOOM
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, NotFound
from ctrexec.groups import missing
from ctrexec.groups.backoff import (
    MAX_BACKOFF,
    RESET_AFTER,
    delay_for,
    next_delay,
    remaining_wait,
    same_exit,
    stale,
)
from ctrexec.groups.presence import DEFAULT_LOCK_DIR, presence
from ctrexec.tasks import grouplock, logkeeper, runs
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks.events import MAX_RECONNECT_DELAY, RecordDeleted, TaskEvents
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.reports import TaskInfo
from ctrexec.tasks.restarts import should_restart, should_revive

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

log = logging.getLogger("ctrexec.groups.supervisor")
#: How often the stop watcher checks that run() is still going (only then: a set
#: ``stop`` wakes it at once).
STOP_POLL = 0.5
#: How long a restart waits for its group's lock (an up or down under way) before it
#: is retried on the backoff instead: one group's operator never holds up the others.
GROUP_LOCK_WAIT = 10.0
#: How often a task whose shim does not answer for its state is looked at again.
RECHECK_SILENT = 5.0
#: How much of a failed restart's error the label keeps (labels are limited to 4 KiB).
MAX_ERROR_BYTES = 1024


#: Why a task went with no exit seen: the host restarted (its run began before the
#: boot), or it was lost while containerd was down (its run began after the boot,
#: and no task was there LOST_AFTER seconds later: a start takes far less).
HOST_RESTARTED = "host restarted"
TASK_LOST = "task lost"
LOST_AFTER = 30.0


def lost_reason(
    info: TaskInfo, booted: datetime, now: datetime, lost_after: float = LOST_AFTER
) -> str | None:
    """Why the task's run went with no exit seen, or None: it is not so (a container
    never started, a run whose task is there or exited, a start that may be under way)."""
    if (
        info.status is not Status.CREATED
        or info.exit is not None
        or info.pid
        or not info.started_at
    ):
        return None
    if info.started_at < booted:
        return HOST_RESTARTED
    return TASK_LOST if (now - info.started_at).total_seconds() >= lost_after else None


class Supervisor:
    """Watches one namespace: restarts tasks by their policy, removes exited --rm ones."""

    def __init__(
        self,
        executor: Executor,
        *,
        reconnect_delay: float = 1.0,
        max_backoff: float = MAX_BACKOFF,
        reset_after: float = RESET_AFTER,
        lock_dir: StrPath = DEFAULT_LOCK_DIR,
        boot_time: Callable[[], float] = _linux.boot_time,
        lost_after: float = LOST_AFTER,
        recheck_silent: float = RECHECK_SILENT,
    ) -> None:
        """``boot_time``: when the host booted (tests pretend a reboot with it);
        ``lost_after``: see :func:`lost_reason`; ``recheck_silent``: how often a task
        whose state is unknown (its shim silent) is looked at again."""
        self.executor = executor
        self.boot_time = boot_time
        self.lost_after = lost_after
        self.recheck_silent = recheck_silent
        self.lock_dir = Path(lock_dir)
        self.client = executor.client
        self.reconnect_delay = reconnect_delay
        self.max_backoff = max_backoff
        self.reset_after = reset_after
        self._guard = threading.Lock()
        #: One timer per container waiting for its restart; also the "pending" set.
        self._timers: dict[str, threading.Timer] = {}
        #: Timer threads whose action is under way (joined when run() ends).
        self._running: set[threading.Thread] = set()
        #: The containers whose action is under way, and an exit of one seen meanwhile,
        #: handled once the action has written its labels (see :meth:`_on_exit`).
        self._acting: set[str] = set()
        self._deferred: dict[str, tuple[ExitStatus, bool]] = {}
        #: Set when run() ends: nothing is scheduled after that.
        self._closed = False
        self._stream: TaskEvents | None = None
        self._restarts = 0
        #: One removal of a deleted record's files at a time, so one of them reports it.
        self._vanishing = threading.Lock()
        #: The containers whose shim did not answer when last asked (said once each).
        self._silent: set[str] = set()

    @property
    def pending(self) -> set[str]:
        """The containers with a restart, removal or start scheduled and not yet due."""
        with self._guard:
            return set(self._timers)

    @property
    def restarts(self) -> int:
        """How many restarts this supervisor made (timer threads update it)."""
        with self._guard:
            return self._restarts

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set; survives containerd restarts (the stream reconnects).

        One watcher thread for the whole run turns ``stop`` into a cancel of the
        stream; pending restart timers are cancelled on the way out, so nothing
        restarts a task after ``run`` returns.
        """
        done = threading.Event()
        watcher = threading.Thread(
            target=self._cancel_on_stop, args=(stop, done), name="ctrexec-supervise-stop"
        )
        watcher.daemon = True
        watcher.start()
        logd = threading.Thread(  # the log daemon's periodic keeper
            target=logkeeper.keep, args=(self.client, self.executor.state_dir, done)
        )
        logd.daemon = True
        logd.start()
        try:
            with presence(self.client, self.lock_dir):
                while not stop.is_set():
                    self._serve(stop)
                    stop.wait(self.reconnect_delay)
        finally:
            done.set()
            watcher.join()
            logd.join()
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
        """One event stream: reconcile once it is live and after each break, act on exits.

        The stream reconnects by itself; this returns only when it cannot be opened
        (containerd down at start: run() tries again) or when ``stop`` cancels it.
        """
        try:
            stream = self.executor.events(
                reconnect_delay=self.reconnect_delay,
                max_reconnect_delay=max(self.reconnect_delay, MAX_RECONNECT_DELAY),
                deletions=True,
            )
        except CtrexecError as exc:
            log.warning("cannot subscribe to events: %s", exc)
            return
        with self._guard:
            self._stream = stream
        try:
            if stop.is_set():  # set before the watcher could see this stream
                return
            log.info("watching namespace %s (events are live)", self.client.namespace)
            self.reconcile()
            for event in stream:
                if isinstance(event, EventsMissed):
                    log.warning("lost containerd's events (%s); listing again", event.reason)
                    self.reconcile()
                elif isinstance(event, TaskOOM):
                    log.warning(
                        "%s: the OOM killer ran in its cgroup (memory limit reached)",
                        event.task_id,
                    )
                elif isinstance(event, TaskExited):  # a record gone meanwhile ends no stream
                    exited = functools.partial(self._on_exit, event.task_id, event.exit, live=True)
                    self._act(event.task_id, "handling of an exit", exited)
                elif isinstance(event, RecordDeleted):
                    self._vanished(event.task_id, event.labels)
        except CtrexecError as exc:
            if not stop.is_set():
                log.warning("event stream ended: %s", exc)
        finally:
            with self._guard:
                self._stream = None
            stream.cancel()

    def _cancel_timers(self) -> None:
        """Cancel what is scheduled, wait for what is under way, and take back the
        "restart pending" marks of the cancelled ones: no restart is due from here
        (the next supervisor's reconcile schedules it again). Best effort."""
        with self._guard:
            self._closed = True
            cancelled = list(self._timers)
            threads = [*self._timers.values(), *self._running]
            self._timers.clear()
        for timer in threads:
            if isinstance(timer, threading.Timer):
                timer.cancel()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()
        for container_id in cancelled:
            with contextlib.suppress(CtrexecError):
                containers.update_labels(self.client, container_id, {lbl.RESTART_PENDING: None})

    def reconcile(self) -> None:
        """Apply the policy to every stopped task, for exits missed while away, and to
        every task that went with no exit seen (:func:`lost_reason`): the policy's are
        started again (a group's namespace is made again first, by the start), the
        others reported exited, with the reason. A task whose state is unknown (its
        shim does not answer) is left alone and looked at again later."""
        for info in self.executor.list(all_tasks=True):
            self._reconcile_one(info)

    def _reconcile_one(self, info: TaskInfo) -> None:
        booted = datetime.fromtimestamp(self.boot_time(), UTC)
        if info.status is Status.UNKNOWN:
            self._unreachable(info.id, info.unknown_reason)
            return
        self._answers_again(info)
        why = lost_reason(info, booted, datetime.now(UTC), self._lost_after(info.labels))
        if info.status is Status.STOPPED and info.exit is not None:
            exited = functools.partial(self._on_exit, info.id, info.exit, live=False)
            self._act(info.id, "handling of an exit", exited)  # removed since: no stream's end
        elif why is not None and should_revive(info.labels):
            revive = lambda cid=info.id: self._revive(cid, booted)  # noqa: E731
            self._schedule(info.id, 0, "start after " + why, revive)
        elif why is not None:
            report = lambda cid=info.id: self._report_lost(cid, booted)  # noqa: E731
            self._act(info.id, "report of a lost task", report)

    def _unreachable(self, container_id: str, reason: str | None) -> None:
        """Its shim did not answer for its state: no restart, no removal (it may well
        run, and a second copy would split its group); said once, asked again later."""
        with self._guard:
            first = container_id not in self._silent
            self._silent.add(container_id)
        if first:
            log.warning(
                "%s: its state could not be read (%s); it was left as it is, not restarted",
                container_id,
                reason or tasks.SHIM_SILENT,
            )
        recheck = lambda: self._recheck(container_id)  # noqa: E731
        self._schedule(container_id, self.recheck_silent, "check of a silent task", recheck)

    def _recheck(self, container_id: str) -> None:
        try:
            info = self.executor.inspect(container_id, addresses=False)
        except NotFound:
            with self._guard:
                self._silent.discard(container_id)
            return
        except CtrexecError as exc:  # containerd slow to list as well: ask again later
            self._unreachable(container_id, str(exc))
            return
        self._reconcile_one(info)

    def _answers_again(self, info: TaskInfo) -> None:
        with self._guard:
            if info.id not in self._silent:
                return
            self._silent.discard(info.id)
        log.info("%s: its shim answered again; its task is %s", info.id, info.status.value)

    def _lost_after(self, labels: Mapping[str, str]) -> float:
        """How long a run with no task must have been going to be lost: at once when
        a restart of it is pending (its exit was heard, and a start by hand would have
        taken the mark back), so a restart whose task went with its shim while it was
        unreadable is not dropped."""
        return 0.0 if labels.get(lbl.RESTART_PENDING) == "true" else self.lost_after

    def _revive(self, container_id: str, booted: datetime) -> None:
        """Start it again unless someone did meanwhile (a start by hand clears the
        "stopped by user" mark and the backoff, as dockerd's start at boot does)."""
        info = self.executor.inspect(container_id, addresses=False)
        why = lost_reason(info, booted, datetime.now(UTC), self._lost_after(info.labels))
        if why is None:
            return
        self.executor.start(container_id)
        with self._guard:
            self._restarts += 1
        whose = f"group {info.group}: " if info.group else ""
        log.info("%sstarted %s again, its task gone (%s)", whose, container_id, why)

    def _report_lost(self, container_id: str, booted: datetime) -> None:
        """No policy brings it back: say it exited, and why, in its labels."""
        info = self.executor.inspect(container_id, addresses=False)
        why = lost_reason(info, booted, datetime.now(UTC), self.lost_after)
        if why is None:
            return
        at = booted if why == HOST_RESTARTED else datetime.now(UTC)
        containers.update_labels(
            self.client, container_id, runs.lost_run(info.labels, at=at, reason=why)
        )
        log.info(
            "%s: its task went (%s); reported exited, no restart policy applies", container_id, why
        )

    def _on_exit(self, container_id: str, status: ExitStatus, *, live: bool) -> None:
        """Act on one exit; ``live`` (seen as an event) logs it even when nothing is done.

        The exit of a task that an action here has just restarted waits for that
        action: its count and backoff are written once the restart's task started,
        and the policy needs them. A restart is marked pending in the labels before
        its timer is set, so ``ps`` says "Restarting" for as long as it is due.
        """
        with self._guard:
            if container_id in self._acting:
                self._deferred[container_id] = (status, live)
                return
        try:
            record = containers.get(self.client, container_id)
        except NotFound:
            return
        labels = dict(record.labels)
        if labels.get(lbl.MANAGED) != "true" or stale(labels, status):
            return
        if live:
            labels = self._keep_exit_of_gone_task(container_id, labels, status)
        what = f"{container_id} {describe(status)}"
        if should_restart(labels, status.exit_code):
            delay = delay_for(
                labels, status.exited_at, cap=self.max_backoff, reset_after=self.reset_after
            )
            wait = remaining_wait(labels, status, delay)
            due = datetime.now(UTC) + timedelta(seconds=wait)
            containers.update_labels(
                self.client,
                container_id,
                {lbl.RESTART_PENDING: "true", lbl.RESTART_DUE: due.isoformat()},
            )
            restart = lambda: self._restart(container_id, delay, status, labels)  # noqa: E731
            if self._schedule(container_id, wait, "restart", restart):
                if wait < delay:
                    rest = "the rest of an earlier supervisor's wait"
                    log.info("%s; restarting in %gs (%s)", what, wait, rest)
                else:
                    log.info("%s; restarting in %gs", what, delay)
            return
        self._call_off(container_id, labels)
        if labels.get(lbl.AUTO_REMOVE) == "true":
            remove = lambda: self._remove(container_id, status)  # noqa: E731
            if self._schedule(container_id, 0, "removal", remove):
                log.info("%s; removing it (--rm)", what)
        elif live:
            log.info("%s", what)

    def _keep_exit_of_gone_task(
        self,
        container_id: str,
        labels: dict[str, str],
        status: ExitStatus,
        *,
        any_code: bool = False,
    ) -> dict[str, str]:
        """Keep the exit heard of a run whose task is gone; the labels, updated.

        A shim that dies (SIGKILL, the OOM killer, a crash) takes its tasks with it:
        containerd 1.6, 1.7 and 2.1 send each task's exit (137) and delete the task
        at once, exit and all, as they reap the shim. With no task and no exit kept,
        the run looked never ended ("Created"), and the restart this exit schedules
        took it for a start made meanwhile and gave up in silence (issue 36). Kept as
        a start keeps the exit it replaces, ``ps`` says Exited or Restarting and the
        restart has the exit it checks against. Only the current run's exit: a run
        that began after it (a start under way) is not this exit's. Only a SIGKILL
        exit unless ``any_code`` (a restart due): ``run`` deletes the task of its
        own exit too (``--rm``, a log driver's end), and that is no dead shim.
        """
        run = runs.current(labels)
        if (
            (status.exit_code != tasks.SIGKILL_EXIT_CODE and not any_code)
            or run is None
            or run.started_at is None
            or status.exited_at is None
            or run.started_at > status.exited_at
            or runs.kept_exit(labels) is not None
        ):
            return labels
        try:
            if tasks.find(self.client, container_id) is not None:
                return labels  # still there (stopped, or not yet reaped: the restart looks again)
            kept = taskinfo.report_gone(
                self.client,
                container_id,
                at=status.exited_at,
                heard=status,
                reason=runs.GONE_WITH_SHIM,
            )
            if kept is None:
                return labels
            log.info("%s: its task went with its shim; its exit is kept", container_id)
            return dict(containers.get(self.client, container_id).labels)
        except CtrexecError as exc:  # removed meanwhile (run --rm, rm -f): nothing to keep
            log.debug("%s: could not keep its exit: %s", container_id, exc)
            return labels

    def _schedule(
        self, container_id: str, delay: float, what: str, action: Callable[[], None]
    ) -> bool:
        """Run ``action`` after ``delay`` unless one is pending for the container."""
        with self._guard:
            if container_id in self._timers or self._closed:
                return False
            timer = threading.Timer(delay, self._run_action, args=(container_id, what, action))
            timer.daemon = True
            self._timers[container_id] = timer
            timer.start()
            return True

    def _run_action(self, container_id: str, what: str, action: Callable[[], None]) -> None:
        # No longer pending once due: an exit seen while this runs (of the task it
        # restarted) is kept and handled after it, and may schedule the next restart.
        me = threading.current_thread()
        with self._guard:
            self._timers.pop(container_id, None)
            self._running.add(me)
            self._acting.add(container_id)
        try:
            self._act(container_id, what, action)
        finally:
            with self._guard:
                self._acting.discard(container_id)
                deferred = self._deferred.pop(container_id, None)
            try:
                if deferred is not None:
                    self._act(
                        container_id,
                        "handling of an exit",
                        lambda: self._on_exit(container_id, deferred[0], live=deferred[1]),
                    )
            finally:
                with self._guard:
                    self._running.discard(me)

    def _act(self, container_id: str, what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except CtrexecError as exc:
            if not self._gone(container_id):  # removed meanwhile is no failure
                log.warning("%s of %s failed: %s", what, container_id, exc)

    def _gone(self, container_id: str) -> bool:
        """Whether the record was removed, read again: a NotFound from a start can as
        well mean that a namespace file or an image went."""
        try:
            containers.get(self.client, container_id)
        except NotFound:
            return True
        except CtrexecError:
            return False
        return False

    def _call_off(self, container_id: str, labels: Mapping[str, str]) -> None:
        """No restart is due after all: take back the "restart pending" mark."""
        if lbl.RESTART_PENDING in labels or lbl.RESTART_DUE in labels:
            containers.update_labels(
                self.client, container_id, {lbl.RESTART_PENDING: None, lbl.RESTART_DUE: None}
            )

    def _restart(
        self, container_id: str, delay: float, status: ExitStatus, seen: Mapping[str, str]
    ) -> None:
        """Restart it if that still stands (:meth:`_still_due`). A start that fails is
        logged, kept in the labels and tried again on the backoff; only a restart
        that happened is counted. A record deleted meanwhile ends it (``seen``: its
        labels at the exit, which say where its files are)."""
        try:  # under its group's lock, bounded: a busy group is retried on the backoff
            with grouplock.of_record(self.executor.client, seen, wait=GROUP_LOCK_WAIT):
                labels = self._still_due(container_id, status)
                if labels is None:
                    return
                begun = datetime.now(UTC)  # before the start: its run's exit comes after
                self.executor.start(container_id, by_policy=True)
        except CtrexecError as exc:
            if not self._gone(container_id):
                self._retry(container_id, delay, status, exc, seen)
            else:
                self._vanished(container_id, seen)
            return
        except Exception as exc:  # a bug, not containerd's answer: said, and tried again
            log.exception("restart of %s raised", container_id)
            self._retry(container_id, delay, status, exc, seen)
            return
        self._restarted(container_id, labels, delay, begun)

    def _vanished(self, container_id: str, seen: Mapping[str, str]) -> None:
        """A record is gone: remove the files it left and say so, once. ctrexec's own
        destroy removes them before the record, so only a record deleted outside
        ctrexec (``ctr container rm``) leaves any, and only that one is reported."""
        try:
            with self._vanishing:
                removed = missing.remove_files(self.executor, container_id, {container_id: seen})
        except CtrexecError as exc:
            log.warning("%s is gone; could not look for its files: %s", container_id, exc)
            return
        if not removed:
            return
        group = seen.get(lbl.GROUP)
        if group:
            log.warning("%s", missing.report(group, container_id))
        else:
            log.warning(
                "%s was deleted outside ctrexec; removed its log and host files", container_id
            )

    def _still_due(self, container_id: str, status: ExitStatus) -> dict[str, str] | None:
        """The labels, read again now, when the restart stands: the task is still
        stopped by this exit and the policy still says so (a ``stop`` since says no)."""
        info = self.executor.inspect(container_id, addresses=False)
        if info.status is Status.UNKNOWN:
            self._unreachable(container_id, info.unknown_reason)  # its exit decides, later
            return None
        if info.status is Status.CREATED and not info.pid and info.exit is None:
            # Its task went with its shim after the exit was heard (not yet reaped then).
            self._keep_exit_of_gone_task(container_id, dict(info.labels), status, any_code=True)
            info = self.executor.inspect(container_id, addresses=False)
        if info.status is not Status.STOPPED or info.exit is None:
            # Started meanwhile, by hand or by another supervisor.
            log.info("%s: no restart needed, its task is %s", container_id, info.status.value)
            return None
        if not same_exit(info.exit, status):
            return None  # another exit since: that one schedules its own restart
        labels = dict(info.labels)
        if should_restart(labels, info.exit.exit_code):
            return labels
        if labels.get(lbl.STOPPED_BY_USER) == "true":
            log.info("%s was stopped by hand; not restarting it", container_id)
        self._call_off(container_id, labels)
        return None

    def _retry(
        self,
        container_id: str,
        delay: float,
        status: ExitStatus,
        exc: Exception,
        seen: Mapping[str, str],
    ) -> None:
        """A restart that failed: say why, in the labels (for ``inspect``) and the log,
        and try again after the next backoff. It stays pending; the count stays."""
        wait = next_delay(delay, delay, 0.0, cap=self.max_backoff, reset_after=self.reset_after)
        reason = str(exc).encode()[:MAX_ERROR_BYTES].decode(errors="ignore")
        due = (datetime.now(UTC) + timedelta(seconds=wait)).isoformat()
        with contextlib.suppress(CtrexecError):  # the log line says it anyway
            containers.update_labels(
                self.client, container_id, {lbl.RESTART_ERROR: reason, lbl.RESTART_DUE: due}
            )
        log.warning("restart of %s failed: %s; retrying in %gs", container_id, exc, wait)
        retry = lambda: self._restart(container_id, wait, status, seen)  # noqa: E731
        if not self._schedule(container_id, wait, "restart", retry) and self._is_closed():
            with contextlib.suppress(CtrexecError):  # run() ended: no restart is due here
                containers.update_labels(self.client, container_id, {lbl.RESTART_PENDING: None})

    def _is_closed(self) -> bool:
        with self._guard:
            return self._closed

    def _restarted(
        self, container_id: str, labels: Mapping[str, str], delay: float, begun: datetime
    ) -> None:
        """Count the restart that happened. A ``stop`` that came while it started
        left its mark in the labels this update answers with: stopped again, then."""
        count = int(labels.get(lbl.RESTART_COUNT, "0") or 0) + 1
        update: dict[str, str | None] = {
            lbl.RESTART_COUNT: str(count),
            lbl.RESTART_BACKOFF: f"{delay:g}",
            lbl.RESTART_STARTED_AT: begun.isoformat(),
            lbl.RESTART_PENDING: None,
            lbl.RESTART_ERROR: None,
            lbl.RESTART_DUE: None,
        }
        try:
            record = containers.update_labels(self.client, container_id, update)
        except CtrexecError as exc:
            log.warning("restarted %s, but could not count it: %s", container_id, exc)
            return
        finally:  # after the labels: whoever reads this may read them
            with self._guard:
                self._restarts += 1
        log.info("restarted %s (attempt %d)", container_id, count)
        if record.labels.get(lbl.STOPPED_BY_USER) == "true":
            log.info("%s was stopped by hand while it restarted; stopping it", container_id)
            self.executor.stop(container_id, remove=False)  # an --rm one: its exit removes it

    def _remove(self, container_id: str, status: ExitStatus) -> None:
        state = tasks.find(self.client, container_id)
        if state is not None and state.unknown:
            self._unreachable(container_id, state.reason)  # removed once it answers
            return
        if state is not None and state.status is not Status.STOPPED:
            return  # started again meanwhile: its next exit decides
        if state is not None and state.exit is not None and not same_exit(state.exit, status):
            return
        self.executor.destroy(container_id)


def describe(status: ExitStatus) -> str:
    """An exit as the log says it: ``exited with code 137 (OOM killed)``."""
    return f"exited with code {status.exit_code}" + (" (OOM killed)" if status.oom_killed else "")


def serve(executor: Executor, stop: threading.Event | None = None) -> None:
    """Run a supervisor in this thread until ``stop`` (or forever)."""
    Supervisor(executor).run(stop or threading.Event())
