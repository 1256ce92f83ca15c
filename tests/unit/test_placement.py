"""Where helpers start: their own systemd scope under systemd, their caller's elsewhere."""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

import pytest
from _zombie import zombie

from ctrexec import placement, procfs

if TYPE_CHECKING:
    from pathlib import Path

ARGV = ["/usr/bin/containerd", "--config", "/x/config.toml"]


@pytest.fixture
def systemd_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    booted = tmp_path / "run-systemd-system"
    booted.mkdir()
    monkeypatch.setattr(placement, "SYSTEMD_BOOTED_DIR", str(booted))
    monkeypatch.setattr(placement.os, "geteuid", lambda: 0)
    monkeypatch.setattr(placement.shutil, "which", lambda *a, **k: "/usr/bin/systemd-run")
    monkeypatch.delenv(placement.SCOPE_ENV, raising=False)
    return booted


def test_under_systemd_the_helper_gets_a_scope_of_its_own(systemd_host: Path) -> None:
    argv = placement.helper_argv("containerd", ARGV)
    assert argv[:4] == ["/usr/bin/systemd-run", "--scope", "--quiet", "--collect"]
    assert "--slice=ctrexec.slice" in argv
    # The helper's own argv follows the separator whole: systemd-run executes it in place.
    assert argv[argv.index("--") + 1 :] == ARGV
    unit = next(a for a in argv if a.startswith("--unit="))
    assert unit.startswith("--unit=ctrexec-containerd-") and unit.endswith(".scope")


def test_each_start_names_a_new_scope(systemd_host: Path) -> None:
    """A scope that a shim keeps alive after its containerd died must not block the next."""
    names = {placement.scope_unit("containerd") for _ in range(20)}
    assert len(names) == 20


def test_without_systemd_the_argv_is_unchanged(
    systemd_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    systemd_host.rmdir()
    assert placement.helper_argv("logd", ARGV) == ARGV


def test_the_old_placement_can_be_asked_for(
    systemd_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(placement.SCOPE_ENV, "0")
    assert placement.helper_argv("server", ARGV) == ARGV


def test_only_root_asks_the_system_manager(
    systemd_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(placement.os, "geteuid", lambda: 1000)
    assert placement.helper_argv("server", ARGV) == ARGV


def test_no_systemd_run_no_wrapper(systemd_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement.shutil, "which", lambda *a, **k: None)
    assert placement.helper_argv("server", ARGV) == ARGV


def test_this_machine_is_told_apart() -> None:
    """The real test, on whatever host this runs: a directory systemd makes at boot."""
    assert placement.systemd_booted() == os.path.isdir("/run/systemd/system")


def test_placed_once_the_helper_left_our_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    here = os.getpid()
    seen = iter(["/a.service", "/a.service", "/ctrexec.slice/ctrexec-server-1-00.scope"])
    monkeypatch.setattr(
        placement, "cgroup_of", lambda pid: "/a.service" if pid == here else next(seen)
    )
    monkeypatch.setattr(procfs, "process_alive", lambda pid: True)
    monkeypatch.setattr(placement, "systemd_booted", lambda: True)
    assert placement.helper_placed(4242, timeout=5.0)


def test_not_placed_when_the_helper_is_gone() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not placement.helper_placed(proc.pid, timeout=5.0)


def test_a_zombie_is_not_placed() -> None:
    with zombie() as pid:
        assert not placement.helper_placed(pid, timeout=5.0)


def test_without_systemd_a_helper_in_our_cgroup_is_answered_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(placement, "systemd_booted", lambda: False)
    with subprocess.Popen(["sleep", "30"]) as proc:
        try:
            assert not placement.helper_placed(proc.pid, timeout=3600.0)
        finally:
            proc.kill()
