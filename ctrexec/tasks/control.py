"""Pause, resume, signal and stop a task, refused in the user's words when its state forbids it.

runc answers a pause of a paused container with ``cannot pause a paused container:
unknown``, and containerd a signal to a stopped task with nothing at all. A user who
typed ``pause web`` wants to read ``container web is already paused``, so on a failure
the task's state is read and the refusal is rebuilt from it (docker's sentences), with
the RPC's own error chained. The happy path costs no extra call, except ``signal``,
which must look first: containerd would accept it for a task that already exited.

A forced removal of many (:meth:`Removing.remove_many`) kills here too, after the
mark ``stop`` writes: one owner for the fact that a task a user ended stays ended. A stop
is two halves (:func:`begin_stop`, then the wait), so a stop of many
(:meth:`Removing.stop_many`) can send every signal before it waits for any exit.
"""

from __future__ import annotations

import contextlib
import signal as signals
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctrexec import defaults
from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus, Status
from ctrexec.errors import CtrexecError, DeadlineExceeded, FailedPrecondition, NotFound
from ctrexec.tasks import spec as taskspec

if TYPE_CHECKING:
    from ctrexec._rpc import Pending
    from ctrexec.tasks import stale

_LIVE = (Status.RUNNING, Status.PAUSED)
#: How long a SIGKILLed task may take to be reported gone: the kernel's teardown of a
#: large cgroup is not instant, but it never waits for the task's own code.
KILL_WAIT = 10.0
#: runc's words when the cgroup freezer did not settle and it thawed the task again.
FREEZE_GAVE_UP = "unable to freeze"
#: The pauses between tries of a freeze that gave up: about 3 s in all.
FREEZE_RETRIES = (0.1, 0.2, 0.4, 0.8, 1.6)


def pause(client: Client, task_id: str) -> None:
    """Freeze the task, trying again while the kernel's freezer gives up on a busy cgroup.

    cgroup v1's freezer can stay FREEZING while a process is mid-syscall on a loaded
    host; runc then thaws the cgroup again and answers ``unable to freeze`` (seen in
    CI). The task is left running, as before the call, so another try is safe, and a
    user who typed ``pause`` wants the pause, not the kernel's hiccup.
    """
    for delay in (*FREEZE_RETRIES, None):
        try:
            tasks.pause(client, task_id)
            return
        except CtrexecError as exc:
            status = _status(client, task_id)
            if status is Status.PAUSED:
                raise FailedPrecondition(f"container {task_id} is already paused") from exc
            if status not in _LIVE:
                raise FailedPrecondition(f"container {task_id} is not running") from exc
            if FREEZE_GAVE_UP not in str(exc):
                raise
            if delay is None:
                tries = len(FREEZE_RETRIES) + 1
                raise DeadlineExceeded(
                    f"container {task_id} could not be paused: its processes did not "
                    f"freeze ({tries} tries); it is still running"
                ) from exc
            time.sleep(delay)


def resume(client: Client, task_id: str) -> None:
    try:
        tasks.resume(client, task_id)
    except CtrexecError as exc:
        if _status(client, task_id) is not Status.PAUSED:
            raise FailedPrecondition(f"container {task_id} is not paused") from exc
        raise


def signal(client: Client, task_id: str, signum: int) -> None:
    """Signal a live task; one that is created, exited or absent is an error, as in docker."""
    if _status(client, task_id) not in _LIVE:
        raise FailedPrecondition(f"container {task_id} is not running")
    tasks.kill(client, task_id, signum)  # an exit meanwhile is not an error


def stop(
    client: Client, task_id: str, timeout: float | None, signal: int | str | None
) -> ExitStatus | None:
    """Send the stop signal, then SIGKILL when ``timeout`` passes; the exit (None
    without a task). The caller holds the task's lock.

    No fixed sleep: the armed Wait returns the moment the task exits.
    """
    flight = begin_stop(client, task_id, timeout, signal)
    try:
        if not flight.wait(flight.timeout):
            flight.kill()
            flight.finish(KILL_WAIT)
        return flight.exit
    finally:
        flight.close()


def begin_stop(
    client: Client, task_id: str, timeout: float | None, signal: int | str | None
) -> StopInFlight:
    """Send the stop signal and return the stop in flight, its Wait armed before the
    signal: the first half of :func:`stop`, which a stop of many
    (:func:`ctrexec.tasks.teardown.stop_all`) sends to every task before it waits.
    The caller holds the task's lock until the stop in flight is closed.

    A task with a restart policy is marked stopped by the user first, also when it has
    already exited (docker's stop of a restarting container keeps it stopped): the
    supervisor reads the mark before its restart is due, and again once it has started
    one, so a restart that raced this stop is stopped in either order.
    """
    record = containers.get(client, task_id)
    mark_stopped(client, record)
    state = tasks.find(client, task_id)
    if state is None or state.status is Status.STOPPED:  # nothing to wait for
        return StopInFlight(client, task_id, None, 0.0, None if state is None else state.exit)
    sig = taskspec.parse_signal(signal or record.labels.get(lbl.STOP_SIGNAL, "SIGTERM"))
    if timeout is None:
        timeout = float(record.labels.get(lbl.STOP_TIMEOUT, defaults.DEFAULT_STOP_TIMEOUT))
    if state.status is Status.PAUSED:
        tasks.resume(client, task_id)
    pending = tasks.arm_wait(client, task_id)
    try:
        tasks.kill(client, task_id, sig)
    except BaseException:
        pending.cancel()
        raise
    return StopInFlight(client, task_id, pending, timeout, None)


class StopInFlight:
    """A stop whose signal was sent; its exit comes through the Wait armed before it."""

    def __init__(
        self, client: Client, task_id: str, pending: Pending[Any] | None, timeout: float,
        exit: ExitStatus | None,
    ) -> None:  # fmt: skip
        self.client = client
        self.task_id = task_id
        self.timeout = timeout
        #: The task's exit once known (None without a task).
        self.exit = exit
        self._pending = pending

    def wait(self, seconds: float) -> bool:
        """True once the task has exited, False if it had not within ``seconds``."""
        if self._pending is None:
            return True
        try:
            self.exit = tasks.collect(self._pending, seconds)
        except DeadlineExceeded:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL every process of the task: its stop timeout has passed."""
        tasks.kill(self.client, self.task_id, signals.SIGKILL, all_processes=True)

    def finish(self, seconds: float) -> None:
        """Wait for the exit the SIGKILL brings; DeadlineExceeded if none within ``seconds``."""
        if self._pending is not None:
            self.exit = tasks.collect(self._pending, seconds)

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()


def mark_stopped(client: Client, record: containers.Container) -> None:
    """Mark a task with a restart policy stopped by the user, its restart pending no
    more: the one mark the supervisor honours before a restart is due and again once
    it has started one (``stop`` and a forced removal both write it before a signal)."""
    if lbl.RESTART_POLICY in record.labels:
        mark = {lbl.STOPPED_BY_USER: "true", lbl.RESTART_PENDING: None, lbl.RESTART_DUE: None}
        containers.update_labels(client, record.id, mark)


def kill_for_removal(client: Client, task_id: str) -> None:
    """SIGKILL a task about to be removed, marked first (:func:`mark_stopped`), so
    that no supervisor restarts what is being removed when it sees the exit."""
    mark_stopped(client, containers.get(client, task_id))
    if _status(client, task_id) in _LIVE:
        tasks.kill(client, task_id, signals.SIGKILL, all_processes=True)


class Removing:
    """The Executor's stop and removal of many tasks (:class:`~ctrexec.Executor` inherits it)."""

    client: Client
    files_dir: Path
    state_dir: Path | None

    #: One lock per task id, made at its first use (the Executor's ``__init__`` sets both).
    _locks: dict[str, threading.Lock]
    _locks_guard: threading.Lock

    def _lock(self, task_id: str) -> threading.Lock:
        """What orders the acts of this Executor's threads on one task."""
        with self._locks_guard:
            return self._locks.setdefault(task_id, threading.Lock())

    @contextlib.contextmanager
    def _hold_all(self, ids: Iterable[str]) -> Iterator[None]:
        """Every id's lock, taken in one order (sorted), so two acts on many that share
        tasks never wait on each other's locks in a cycle."""
        with contextlib.ExitStack() as held:
            for task_id in sorted(set(ids)):
                held.enter_context(self._lock(task_id))
            yield

    def _forget(self, task_id: str) -> None:
        """Drop a removed task's lock: a long-lived Executor (supervisor, Nomad) sees many."""
        with self._locks_guard:
            self._locks.pop(task_id, None)

    def _destroy(
        self, task_id: str, *, force: bool = False, volumes: bool = False,
        batch: stale.Batch | None = None,
    ) -> None:  # fmt: skip
        """:func:`ctrexec.tasks.stale.destroy`; the caller holds the task's lock."""
        from ctrexec.tasks import stale  # start-up: only a removal needs it

        stale.destroy(self.client, task_id, files_dir=self.files_dir, state_dir=self.state_dir,
                      force=force, volumes=volumes, batch=batch)  # fmt: skip

    def stop_many(
        self,
        ids: Sequence[str],
        *,
        timeout: float | None = None,
        signal: int | str | None = None,
        remove: bool = False,
    ) -> list[tuple[str, CtrexecError | None]]:
        """Stop every task as :meth:`stop` does, in one stop timeout however many there
        are (:func:`ctrexec.tasks.teardown.stop_all`); each id with the error its stop
        raised, if any, in the order given. With ``remove`` (docker's ``stop A B C``), a
        stopped ``auto_remove`` task is then removed, as :meth:`stop` removes one.

        Each task's lock is held from its signal to its exit, so nothing else acts on a
        task being stopped (:meth:`_hold_all`).
        """
        removed: set[str] = set()
        with self._hold_all(ids):
            results = self._stop_all(ids, timeout, signal)
            for i, (task_id, error) in enumerate(results):
                if not remove or error is not None or task_id in removed:
                    continue
                try:
                    if self._remove_if_auto(task_id):
                        removed.add(task_id)
                except CtrexecError as exc:
                    results[i] = (task_id, exc)
        for task_id in removed:
            self._forget(task_id)
        return results

    def _stop_all(
        self, ids: Sequence[str], timeout: float | None, signal: int | str | None
    ) -> list[tuple[str, CtrexecError | None]]:
        """The stops of :meth:`stop_many`, under the locks it holds. A stop of one (the
        CLI's ``stop NAME``, most of them) is :func:`stop` itself: no thread, and no
        import of the phases a stop of many needs."""
        if len(set(ids)) == 1:
            error: CtrexecError | None = None
            try:
                stop(self.client, ids[0], timeout, signal)
            except CtrexecError as exc:
                error = exc
            return [(task_id, error) for task_id in ids]
        from ctrexec.tasks import teardown  # start-up: only a stop of many needs it

        return teardown.stop_all(
            ids,
            lambda task_id: begin_stop(self.client, task_id, timeout, signal),
            kill_wait=KILL_WAIT,
        )

    def _remove_if_auto(self, task_id: str) -> bool:
        """After a user's stop, remove an ``auto_remove`` (``--rm``) task, as docker's
        stop of one does; whether it was removed. The caller holds the task's lock. A
        removal that came first (a supervisor's, for ``--rm``) is as asked: no error."""
        try:
            record = containers.get(self.client, task_id)
        except NotFound:
            return False
        if record.labels.get(lbl.AUTO_REMOVE) != "true":
            return False
        self._destroy(task_id)
        return True

    def remove_many(
        self, ids: Sequence[str], *, force: bool = False, volumes: bool = False
    ) -> list[tuple[str, CtrexecError | None]]:
        """Remove every task, as :meth:`destroy` each; each id with the error its
        removal raised, if any, in the order given (a front end reports them in turn).

        With ``force`` (docker's ``rm -f A B C``), every task is first marked stopped
        by the user and SIGKILLed, all together (bounded threads), so the removal waits
        for the slowest exit, not their sum, and a supervisor restarts none of them;
        then each is destroyed. A kill that fails is left to the removal, which says.

        The removals are one batch (:class:`ctrexec.tasks.stale.Batch`): the look for
        orphaned shims and at the cgroup parents is done once, at the end, under every
        removed id's lock, so that no start of one of those names by this Executor comes
        between; an error there is the last removal's, as a single destroy's would be.
        """
        from ctrexec.tasks import stale  # start-up: only a removal needs it

        if force:
            from ctrexec.tasks import teardown  # start-up: only a forced removal needs it

            teardown.each_at_once(ids, lambda task_id: kill_for_removal(self.client, task_id))
        batch = stale.Batch()
        results: list[tuple[str, CtrexecError | None]] = []
        for task_id in ids:
            try:
                with self._lock(task_id):
                    self._destroy(task_id, force=force, volumes=volumes, batch=batch)
            except CtrexecError as exc:
                results.append((task_id, exc))
            else:
                results.append((task_id, None))
        try:
            with self._hold_all(ids):
                batch.finish(self.client)
        except CtrexecError as exc:
            last = max((i for i, (_, err) in enumerate(results) if err is None), default=None)
            if last is None:
                raise
            results[last] = (results[last][0], exc)
        finally:
            for task_id in ids:
                self._forget(task_id)
        return results


def _status(client: Client, task_id: str) -> Status | None:
    """The task's status, None without a task; NotFound (docker's words) without a container."""
    state = tasks.find(client, task_id)
    if state is None:
        containers.get(client, task_id)
        return None
    return state.status
