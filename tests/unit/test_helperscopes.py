"""doctor's reading of where a helper runs on a systemd host."""

from __future__ import annotations

import os

import pytest

from ctrexec import placement
from ctrexec.doctor import helperscopes
from ctrexec.doctor.findings import Scope


@pytest.mark.parametrize(
    ("role", "cgroup", "unit"),
    [
        ("containerd", "/ctrexec.slice/ctrexec-containerd-41-a1b2c3.scope", None),
        ("logd", "/ctrexec.slice/ctrexec-logd-7-000000.scope", None),
        # the case: started by a oneshot unit's command
        ("containerd", "/system.slice/oneshot-x.service", "oneshot-x.service"),
        ("logd", "/user.slice/user-0.slice/session-3.scope", "session-3.scope"),
        # another helper's scope is not this helper's own
        (
            "logd",
            "/ctrexec.slice/ctrexec-containerd-41-a1b2c3.scope",
            "ctrexec-containerd-41-a1b2c3.scope",
        ),
        ("containerd", "/", "-.slice"),
        ("containerd", "/init.scope", "init.scope"),
    ],
)
def test_foreign_unit(role: str, cgroup: str, unit: str | None) -> None:
    assert helperscopes.foreign_unit(role, cgroup) == unit


def test_cgroup_of_this_process_is_its_unified_line() -> None:
    with open(f"/proc/{os.getpid()}/cgroup", encoding="utf-8") as f:
        line = next((x for x in f.read().splitlines() if x.startswith("0::")), None)
    assert placement.cgroup_of(os.getpid()) == (line[3:] if line else None)


def test_a_gone_process_has_no_cgroup() -> None:
    assert placement.cgroup_of(2**22 + 1) is None  # above pid_max's ceiling


def test_without_systemd_nothing_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helperscopes, "systemd_booted", lambda: False)

    def never(scope: Scope) -> list[tuple[str, int]]:
        raise AssertionError("looked for helpers on a host without systemd")

    monkeypatch.setattr(helperscopes, "_helpers", never)
    assert helperscopes.find(object()) == []  # type: ignore[arg-type]


def test_a_misplaced_helper_is_a_finding_with_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helperscopes, "systemd_booted", lambda: True)
    monkeypatch.setattr(helperscopes, "_helpers", lambda scope: [("logd", 4242)])
    monkeypatch.setattr(helperscopes, "cgroup_of", lambda pid: "/system.slice/job.service")
    (finding,) = helperscopes.find(object())  # type: ignore[arg-type]
    assert finding.kind == "helper-placement" and not finding.garbage
    assert finding.where == "logd (pid 4242)"
    assert "dies when job.service stops" in finding.what
    assert "`kill 4242`" in finding.fix
