"""The supervisor's restart backoff: pure computations from labels, no daemon."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from ctrexec import labels as lbl
from ctrexec.groups.backoff import MAX_BACKOFF, MIN_DELAY, delay_for, next_delay


def test_first_restart_waits_the_base_delay() -> None:
    assert next_delay(0.5, None, None) == 0.5


def test_quick_exits_double_the_delay_up_to_the_cap() -> None:
    delays = [next_delay(0.1, None, None)]
    for _ in range(12):
        delays.append(next_delay(0.1, delays[-1], ran_for=0.2))
    assert delays[:5] == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert delays[-1] == MAX_BACKOFF
    assert all(b >= a for a, b in itertools.pairwise(delays))


def test_a_long_run_resets_to_the_base() -> None:
    assert next_delay(0.1, 25.6, ran_for=10.0) == 0.1
    assert next_delay(0.1, 25.6, ran_for=9.9) == 51.2
    assert next_delay(0.1, 25.6, ran_for=3.0, reset_after=2.0) == 0.1


def test_unknown_run_time_is_not_a_quick_exit() -> None:
    assert next_delay(1.0, 8.0, ran_for=None) == 1.0


def test_zero_base_starts_at_docker_minimum_and_grows() -> None:
    assert next_delay(0.0, None, None) == MIN_DELAY
    assert next_delay(0.0, MIN_DELAY, ran_for=0.0) == 2 * MIN_DELAY


def test_a_base_above_the_cap_is_kept() -> None:
    assert next_delay(90.0, 90.0, ran_for=1.0) == 90.0


def test_delay_for_reads_the_labels() -> None:
    started = datetime(2025, 1, 1, tzinfo=UTC)
    labels = {
        lbl.RESTART_DELAY: "0.25",
        lbl.RESTART_BACKOFF: "1",
        lbl.RESTART_STARTED_AT: started.isoformat(),
    }
    assert delay_for(labels, started + timedelta(seconds=1)) == 2.0
    assert delay_for(labels, started + timedelta(seconds=11)) == 0.25
    assert delay_for({lbl.RESTART_DELAY: "0.25"}, started) == 0.25
    assert delay_for({}, None) == 1.0


def test_delay_for_ignores_garbage_labels() -> None:
    labels = {
        lbl.RESTART_DELAY: "x",
        lbl.RESTART_BACKOFF: "nan?",
        lbl.RESTART_STARTED_AT: "yesterday",
    }
    assert delay_for(labels, datetime.now(UTC)) == 1.0


def test_a_supervisor_started_during_a_backoff_waits_only_what_is_left() -> None:
    """Issue 36, 7a: the due time an earlier supervisor wrote counts, for this exit."""
    from ctrexec.containerd.tasks import ExitStatus
    from ctrexec.groups.backoff import remaining_wait

    now = datetime.now(UTC)
    exit_ = ExitStatus(137, now - timedelta(seconds=12))
    due = {lbl.RESTART_DUE: (now + timedelta(seconds=4)).isoformat()}
    assert 3.0 < remaining_wait(due, exit_, 16.0) <= 4.0
    past = {lbl.RESTART_DUE: (now - timedelta(seconds=2)).isoformat()}
    assert remaining_wait(past, exit_, 16.0) == 0.0
    # A due time of an earlier exit, none, or garbage: the whole delay.
    older = {lbl.RESTART_DUE: (now - timedelta(seconds=20)).isoformat()}
    assert remaining_wait(older, exit_, 16.0) == 16.0
    assert remaining_wait({}, exit_, 16.0) == 16.0
    assert remaining_wait({lbl.RESTART_DUE: "soon"}, exit_, 16.0) == 16.0
    # Never more than the delay this exit earns.
    late = {lbl.RESTART_DUE: (now + timedelta(seconds=60)).isoformat()}
    assert remaining_wait(late, exit_, 16.0) == 16.0
