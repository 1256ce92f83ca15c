"""Which tasks a host restart took away come back, by policy, as at dockerd's start."""

from __future__ import annotations

import pytest

from ctrexec import _linux
from ctrexec.tasks.restarts import should_revive

POLICY, STOPPED, RM = (
    "io.ctrexec.restart.policy",
    "io.ctrexec.restart.stopped-by-user",
    "io.ctrexec.auto-remove",
)


@pytest.mark.parametrize(
    ("labels", "back"),
    [
        ({POLICY: "always"}, True),
        ({POLICY: "always", STOPPED: "true"}, True),
        ({POLICY: "unless-stopped"}, True),
        ({POLICY: "unless-stopped", STOPPED: "true"}, False),
        ({POLICY: "on-failure"}, True),
        ({POLICY: "on-failure", STOPPED: "true"}, False),
        ({POLICY: "no"}, False),
        ({}, False),
        ({POLICY: "always", RM: "true"}, False),
    ],
)
def test_should_revive(labels: dict[str, str], back: bool) -> None:
    assert should_revive(labels) is back


def test_boot_time_reads_btime() -> None:
    assert _linux.boot_time("cpu  1 2 3\nbtime 1764590000\nprocesses 9\n") == 1764590000.0
    with pytest.raises(OSError):
        _linux.boot_time("cpu 1\n")
    assert 0 < _linux.boot_time() < 2**40
