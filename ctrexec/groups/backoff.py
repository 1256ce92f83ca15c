"""How long the supervisor waits before a restart, from a container's labels alone (no I/O).

Docker's doubling backoff (:func:`next_delay`), or what is left of a wait an earlier
supervisor began (:func:`remaining_wait`). Whether to restart at all is the task's rule
(:mod:`ctrexec.tasks.restarts`, which ``TaskInfo.done`` reads too). Kept apart from
:mod:`ctrexec.groups.supervisor`, which acts on them, so they are tested without a daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from ctrexec import labels as lbl
from ctrexec.containerd.tasks import ExitStatus

#: Docker's restart backoff: each quick exit doubles the delay, up to MAX_BACKOFF,
#: and a run that lasted RESET_AFTER seconds brings it back to the policy's delay.
MAX_BACKOFF = 60.0
RESET_AFTER = 10.0
#: The first delay when the policy's is 0 (docker's 100 ms), so doubling can grow.
MIN_DELAY = 0.1


def next_delay(
    base: float,
    previous: float | None,
    ran_for: float | None,
    *,
    cap: float = MAX_BACKOFF,
    reset_after: float = RESET_AFTER,
) -> float:
    """The wait before the next restart: ``base``, doubled per quick exit, capped.

    ``previous`` is the wait before the last restart (None: no restart yet) and
    ``ran_for`` how long that run lasted (None: unknown). A crash-looping task thus
    backs off instead of restarting forever at one rate, as with docker and Nomad.
    """
    first = base if base > 0 else MIN_DELAY
    if previous is None or ran_for is None or ran_for >= reset_after:
        return first
    return min(max(previous, first) * 2, max(cap, first))


def delay_for(
    labels: Mapping[str, str],
    exited_at: datetime | None,
    *,
    cap: float = MAX_BACKOFF,
    reset_after: float = RESET_AFTER,
) -> float:
    """:func:`next_delay` for one exit, from the container's labels alone."""
    base = label_float(labels.get(lbl.RESTART_DELAY))
    started = label_time(labels.get(lbl.RESTART_STARTED_AT))
    ran_for = (exited_at - started).total_seconds() if started and exited_at else None
    return next_delay(
        1.0 if base is None else base,
        label_float(labels.get(lbl.RESTART_BACKOFF)),
        ran_for,
        cap=cap,
        reset_after=reset_after,
    )


def label_float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def label_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def stale(labels: Mapping[str, str], status: ExitStatus) -> bool:
    """An exit from before the supervisor's last restart (a late event, or a reconcile
    that raced the event): acting on it would restart, and back off, twice."""
    started = label_time(labels.get(lbl.RESTART_STARTED_AT))
    return started is not None and status.exited_at is not None and status.exited_at < started


def remaining_wait(labels: Mapping[str, str], status: ExitStatus, delay: float) -> float:
    """The wait before this exit's restart: ``delay``, or what is left of it when an
    earlier supervisor already waited part of it (its due time is in the labels, and
    belongs to this exit: not before it). A supervisor restarted during a 16 s
    backoff thus does not wait 16 s again (issue 36)."""
    due = label_time(labels.get(lbl.RESTART_DUE))
    if due is None or status.exited_at is None or due < status.exited_at:
        return delay
    left = (due - datetime.now(UTC)).total_seconds()
    return min(delay, max(0.0, left))


def same_exit(a: ExitStatus, b: ExitStatus) -> bool:
    if a.exited_at is None or b.exited_at is None:
        return a.exit_code == b.exit_code
    return a.exited_at == b.exited_at
