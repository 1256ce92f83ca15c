"""ExitStatus's OOM fact: JSON round trip and how the supervisor words it."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime

import attrs
import pytest

from ctrexec.containerd.tasks import ExitStatus
from ctrexec.groups.supervisor import describe


def test_oom_killed_round_trips_through_json() -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    status = ExitStatus(exit_code=137, exited_at=at, oom_killed=True)
    assert status.to_json() == {"code": 137, "exited_at": at.isoformat(), "oom_killed": True}
    assert ExitStatus.from_json(status.to_json()) == status


def test_json_from_before_the_field_reads_as_not_oom_killed() -> None:
    assert ExitStatus.from_json({"code": 137, "exited_at": None}) == ExitStatus(exit_code=137)


def test_describe() -> None:
    assert describe(ExitStatus(exit_code=3)) == "exited with code 3"
    assert (
        describe(ExitStatus(exit_code=137, oom_killed=True)) == "exited with code 137 (OOM killed)"
    )


def test_exit_code_is_the_name_and_code_still_works_with_a_warning() -> None:
    """Issue 38: ``exit_code`` as on ExecResult and TaskInfo; the old ``code``, as an
    attribute and as a keyword, keeps working for one release and says it is deprecated."""
    status = ExitStatus(137, oom_killed=True)
    assert (status.exit_code, status.signal) == (137, 9)
    with pytest.warns(DeprecationWarning, match=r"ExitStatus\.code is deprecated"):
        assert status.code == 137
    with pytest.warns(DeprecationWarning, match=r"use ExitStatus\.exit_code"):
        old = ExitStatus(code=137, oom_killed=True)
    assert old == status
    assert attrs.evolve(status, oom_killed=False) == ExitStatus(exit_code=137)
    with pytest.raises(TypeError), pytest.warns(DeprecationWarning):
        ExitStatus(exit_code=1, code=2)


def test_the_package_itself_never_reads_the_old_name() -> None:
    """Every ``.code`` of an exit status in the package became ``.exit_code``: with the
    warning an error, what the package does with a status raises nothing."""
    from ctrexec.groups import backoff

    a, b = ExitStatus(exit_code=3), ExitStatus(exit_code=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert backoff.same_exit(a, b)
        assert describe(a) == "exited with code 3"
