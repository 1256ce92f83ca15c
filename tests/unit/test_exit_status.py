"""ExitStatus's OOM fact: JSON round trip and how the supervisor words it."""

from __future__ import annotations

from datetime import UTC, datetime

from ctrexec.containerd.tasks import ExitStatus
from ctrexec.groups.supervisor import describe


def test_oom_killed_round_trips_through_json() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    status = ExitStatus(code=137, exited_at=at, oom_killed=True)
    assert status.to_json() == {"code": 137, "exited_at": at.isoformat(), "oom_killed": True}
    assert ExitStatus.from_json(status.to_json()) == status


def test_json_from_before_the_field_reads_as_not_oom_killed() -> None:
    assert ExitStatus.from_json({"code": 137, "exited_at": None}) == ExitStatus(code=137)


def test_describe() -> None:
    assert describe(ExitStatus(code=3)) == "exited with code 3"
    assert describe(ExitStatus(code=137, oom_killed=True)) == "exited with code 137 (OOM killed)"
