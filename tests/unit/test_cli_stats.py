"""stats' CPU %: the CPU time used between two readings over the wall time between them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

from ctrexec.cli.verbs import cpu_percent
from ctrexec.containerd.stats import Stats

AT = datetime(2026, 1, 1, tzinfo=UTC)
FIRST = Stats(
    cgroup_version=2,
    cpu_usage_ns=5_000_000_000,
    cpu_user_ns=0,
    cpu_system_ns=0,
    memory_usage=0,
    memory_working_set=0,
    memory_limit=None,
    pids_current=1,
    pids_limit=None,
    read_at=AT,
)


def _later(seconds: float, used_ns: int) -> Stats:
    return attrs.evolve(
        FIRST, cpu_usage_ns=FIRST.cpu_usage_ns + used_ns, read_at=AT + timedelta(seconds=seconds)
    )


def test_one_cpu_busy_is_100_percent_and_two_are_200() -> None:
    assert cpu_percent(FIRST, _later(2, 2_000_000_000)) == 100.0
    assert cpu_percent(FIRST, _later(1, 2_000_000_000)) == 200.0
    assert cpu_percent(FIRST, _later(4, 1_000_000_000)) == 25.0


def test_no_earlier_reading_or_a_reset_counter_is_zero() -> None:
    assert cpu_percent(None, FIRST) == 0.0
    assert cpu_percent(FIRST, _later(1, -1)) == 0.0  # restarted in between
    assert cpu_percent(FIRST, _later(0, 5)) == 0.0
