"""Issue 20, scenarios 7 and 8: a member deleted outside ctrexec, and containerd
stopped in the middle of ``group up``.

7. With ``ctrexec supervise`` running, a member is deleted with ``ctr`` (task killed and
   deleted, container removed). The supervisor says so in one line and removes the
   member's log and host-files directories; ``group ps`` shows it "missing"; ``group
   up`` makes it again, in the group's one namespace with its one address.
8. containerd is SIGKILLed while ``group up`` creates the members (on a private
   containerd). ``group up`` fails with one line and exit 125; once containerd is back,
   ``group up`` again converges, and ``group down`` leaves nothing.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _chaoslib import wait_for
from _integrity import Bridged

from ctrexec.containerd import containers
from ctrexec.errors import NotFound
from ctrexec.groups import missing
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles


def _ctr(g: Bridged, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", "-a", g.address, "-n", g.namespace, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def _gone(g: Bridged, container_id: str) -> bool:
    try:
        containers.get(g.client, container_id)
    except NotFound:
        return True
    return False


def _delete_out_of_band(g: Bridged, container_id: str) -> None:
    """What an operator with ``ctr`` does: kill and delete the task, remove the
    container (and its snapshot). A supervisor may restart a killed task before the
    removal: then it is done again, until the container is gone."""

    def removed() -> bool:
        _ctr(g, "task", "delete", "--force", container_id)
        _ctr(g, "container", "rm", container_id)
        return _gone(g, container_id)

    wait_for(removed, f"ctr to remove {container_id}", timeout=60, interval=0.2)


@pytest.fixture
def supervisor(bridged: Bridged) -> Iterator[Path]:
    """``ctrexec supervise`` on the session's namespace, as a process of the test's own;
    yields the file its log goes to. Stopped by its pid (SIGTERM) after the test."""
    log = bridged.tmp / "supervise.log"
    with log.open("w") as out:
        proc = subprocess.Popen(bridged.cli("supervise"), env=bridged.env, stdout=out, stderr=out)
    try:
        yield log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _member_dirs(g: Bridged, container_id: str) -> list[Path]:
    log_dir = taskfiles.log_path(g.logs, g.namespace, container_id).parent
    files = hostfiles.task_dir(hostfiles.DEFAULT_DIR, g.namespace, container_id).directory
    return [log_dir, files]


@pytest.mark.parametrize("task", ["cli", "srv"])
def test_a_member_deleted_outside_ctrexec_is_reported_cleaned_and_made_again(
    bridged: Bridged, supervisor: Path, task: str
) -> None:
    """``cli`` has no restart policy; ``srv`` (restart always) has a restart pending
    when its container goes, which used to end in silence."""
    g = bridged
    g.up()
    g.wait_sound()
    member = g.member(task)
    dirs = _member_dirs(g, member)
    assert all(d.exists() for d in dirs), dirs
    live = f"watching namespace {g.namespace}"
    wait_for(lambda: live in supervisor.read_text(), "the supervisor's stream", timeout=60)
    _delete_out_of_band(g, member)
    line = missing.report(g.name, member)
    wait_for(lambda: line in supervisor.read_text(), "the supervisor's report", timeout=60)
    assert supervisor.read_text().count(line) == 1
    assert [d for d in dirs if d.exists()] == []
    ps = g.run("group ps", g.name)
    assert ps.returncode == 0, ps.stderr
    rows = [r.split() for r in ps.stdout.splitlines()]
    assert [member, "-", "missing", "-", "-"] in rows, ps.stdout
    assert line in ps.stderr
    g.up()
    g.wait_sound()
    ps = g.run("group ps", g.name)
    assert "missing" not in ps.stdout and ps.stderr == "", ps
    g.down_clean()
