"""Waiting for an exit, as futures: many waiters, no thread per waiter, outages survived.

Each waiter is one ``Tasks.Wait`` call in flight. Its answer completes a
:class:`concurrent.futures.Future` from gRPC's own completion thread, so a thousand
waiters cost a thousand calls and no thread; :meth:`ctrexec.Executor.wait` blocks on
one, and :mod:`ctrexec.tasks.aio` awaits one (``asyncio.wrap_future``). One implementation,
two faces.

A wait ends only with what containerd answered: the exit, or an error. When containerd
goes away the call fails with Unavailable; that is not an exit, so the wait is sent
again, queued by gRPC until containerd is back (``wait_for_ready``); containerd keeps a
stopped task's exit, so an exit during the outage is what the new call answers.
containerd 1.7 and later don't: a shim with no process left is reaped as containerd
starts, task and exit with it, and the new call answers NotFound. That run's end is
kept in the record's labels (:func:`ctrexec.tasks.info.report_gone`, exit code 255,
the reason said) and is what the wait returns.

A wait whose call the task's shim cut (:class:`~ctrexec.errors.ShimClosed`: the run
ended and its task was deleted for a restart or a removal while the call was in
flight, or the shim died) is sent again too: what it answers then holds, the exit
of a task kept stopped, or NotFound for one deleted (whose kept exit
:meth:`ctrexec.Executor.wait` then returns). Cancelling the future (or a timeout
in :func:`wait`) cancels the call; it never becomes an exit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from datetime import UTC, datetime
from typing import Any

import attrs

from ctrexec import _rpc
from ctrexec.containerd import stats, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import ExitStatus
from ctrexec.errors import CtrexecError, DeadlineExceeded, NotFound, ShimClosed, Unavailable
from ctrexec.tasks import info as taskinfo

#: A Wait that fails with Unavailable this soon after it was sent is a quick failure:
#: the socket answers, but nothing serves the call yet (a containerd that is starting,
#: which takes longer on a loaded machine) or ever will.
QUICK_FAILURE = 0.5
#: Quick failures in a row, this many and for this long, are not an outage that waiting
#: can outlast: the wait fails with that error. Counted alone (20 in a row), a loaded
#: containerd 1.7's restart once outlasted the count.
MAX_QUICK_FAILURES = 20
QUICK_FAILURES_FOR = 60.0
#: After a quick failure the wait is sent again after this delay, doubled each time up
#: to the last: no spin while the socket answers at once.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1.0)
#: Calls cut by the shim, in a row for this long, fail the wait with that error: a
#: dead shim's task is cleaned up by containerd in seconds, and a caller that asks
#: again after that gets its answer.
CUTS_FOR = 30.0


def exit_future(
    client: Client, task_id: str, exec_id: str = ""
) -> concurrent.futures.Future[ExitStatus]:
    """A future of the process's exit (the task's, or an exec's with ``exec_id``).

    Arm it before acting when the exit may come at once. ``oom_killed`` is set for a
    task's SIGKILL exit whose cgroup saw an OOM kill, as :meth:`Executor.with_oom`.
    Callbacks added to it run on gRPC's thread: they must not block.
    """
    return _ExitWaiter(client, task_id, exec_id).future


def wait(
    client: Client, task_id: str, timeout: float | None = None, exec_id: str = ""
) -> ExitStatus:
    """Block for the exit; DeadlineExceeded after ``timeout`` seconds (the task runs on)."""
    future = exit_future(client, task_id, exec_id)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError as exc:
        what = f"{task_id} exec {exec_id}" if exec_id else task_id
        raise DeadlineExceeded(f"{what} did not exit within {timeout:g}s") from exc
    finally:
        future.cancel()


class _ExitWaiter:
    """Drives one future through Wait calls (and a Metrics call for an OOM check)."""

    def __init__(self, client: Client, task_id: str, exec_id: str) -> None:
        self._client = client
        self._task_id = task_id
        self._exec_id = exec_id
        self._lock = threading.Lock()
        self._call: _rpc.Pending[Any] | None = None
        self._sent_at = 0.0
        self._quick_failures = 0
        self._quick_since = 0.0
        self._outage_since: datetime | None = None
        self._cuts = 0
        self._cut_since = 0.0
        self.future: concurrent.futures.Future[ExitStatus] = concurrent.futures.Future()
        self.future.add_done_callback(self._on_future_done)
        self._arm()

    def _arm(self) -> None:
        try:
            call = tasks.arm_wait(self._client, self._task_id, self._exec_id, wait_for_ready=True)
        except CtrexecError as exc:  # the connection is closed
            self._settle(error=exc)
            return
        self._track(call)
        call.add_done_callback(self._on_wait)

    def _track(self, call: _rpc.Pending[Any]) -> None:
        """Make ``call`` the one a cancel stops; cancel it now if the future is done."""
        with self._lock:
            late = self.future.done()
            if not late:
                self._call = call
                self._sent_at = time.monotonic()
        if late:
            call.cancel()

    def _on_future_done(self, future: concurrent.futures.Future[ExitStatus]) -> None:
        if future.cancelled():
            with self._lock:
                call, self._call = self._call, None
            if call is not None:
                call.cancel()

    def _on_wait(self, call: _rpc.Pending[Any]) -> None:
        if self.future.done():
            return
        try:
            status = tasks.collect(call)
        except Unavailable as exc:
            if self._outage_since is None:
                self._outage_since = datetime.now(UTC)
            if self._outlasts(exc):
                self._arm_again()
            return
        except NotFound as exc:
            if self._outage_since is not None and not self._exec_id:
                # RPCs of their own: off gRPC's callback thread, which must not block.
                threading.Thread(target=self._gone, args=(exc,), daemon=True).start()
                return
            self._settle(error=exc)
            return
        except ShimClosed as exc:
            if self._cuts == 0:
                self._cut_since = time.monotonic()
            self._cuts += 1
            if time.monotonic() - self._cut_since > CUTS_FOR:
                self._settle(error=exc)
            else:
                self._arm_after(RETRY_DELAYS[min(self._cuts, len(RETRY_DELAYS)) - 1])
            return
        except CtrexecError as exc:
            self._settle(error=exc)
            return
        if self._exec_id or status.exit_code != tasks.SIGKILL_EXIT_CODE:
            self._settle(status)
            return
        try:  # only a SIGKILL can be the OOM killer's: ask the cgroup, without blocking
            metrics = tasks.metrics_future(self._client, self._task_id)
        except CtrexecError:
            self._settle(status)
            return
        self._track(metrics)
        metrics.add_done_callback(lambda m: self._on_metrics(m, status))

    def _gone(self, exc: NotFound) -> None:
        """The task went while containerd was away: the run's kept exit, else the error."""
        assert self._outage_since is not None
        try:
            kept = taskinfo.report_gone(self._client, self._task_id, at=self._outage_since)
        except CtrexecError:
            kept = None
        if kept is not None:
            self._settle(kept)
        else:
            self._settle(error=exc)

    def _outlasts(self, exc: Unavailable) -> bool:
        """Whether to send the wait again; else settle with ``exc``."""
        now = time.monotonic()
        if now - self._sent_at >= QUICK_FAILURE:
            self._quick_failures = 0
            return True
        if self._quick_failures == 0:
            self._quick_since = now
        self._quick_failures += 1
        streak = now - self._quick_since
        if self._quick_failures >= MAX_QUICK_FAILURES and streak >= QUICK_FAILURES_FOR:
            self._settle(error=exc)
            return False
        return True

    def _arm_again(self) -> None:
        """Send the wait again: at once after a slow failure (an outage the call sat
        out), after a growing delay after quick ones (a timer: gRPC's callback thread
        must not block)."""
        if self._quick_failures == 0:
            self._arm()
            return
        self._arm_after(RETRY_DELAYS[min(self._quick_failures, len(RETRY_DELAYS)) - 1])

    def _arm_after(self, delay: float) -> None:
        """Send the wait again after ``delay`` seconds, on a timer's thread (gRPC's
        callback thread must not block); its keeper is the timer, which ends then."""
        timer = threading.Timer(delay, self._arm)
        timer.daemon = True
        timer.start()

    def _on_metrics(self, call: _rpc.Pending[Any], status: ExitStatus) -> None:
        with contextlib.suppress(CtrexecError):  # best effort, as Executor.with_oom
            data = tasks.metrics_from(call, self._task_id)
            if data is not None and stats.oom_kills(data) > 0:
                status = attrs.evolve(status, oom_killed=True)
        self._settle(status)

    def _settle(self, status: ExitStatus | None = None, error: CtrexecError | None = None) -> None:
        with self._lock:
            self._call = None
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled
            if error is not None:
                self.future.set_exception(error)
            elif status is not None:
                self.future.set_result(status)
