"""A restart the supervisor has due, as ``ps`` and ``inspect`` say it (issue 18).

The supervisor marks a pending restart, and why the last one failed, in the record's
labels; these read them back the way another process (``ps``) does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ctrexec import labels as lbl
from ctrexec.cli.views.inspect import document
from ctrexec.cli.views.ps import execute, parse_template, state, status_text
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import ExitStatus, ProcessState, Status
from ctrexec.tasks import info as taskinfo

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
EXITED = ExitStatus(exit_code=137, exited_at=NOW - timedelta(seconds=7))


def _record(labels: dict[str, str]) -> containers.Container:
    return containers.Container(
        id="web",
        image="docker.io/library/busybox:latest",
        labels={lbl.MANAGED: "true", lbl.RUN_ID: "1", **labels},
        spec={},
        snapshotter="overlayfs",
        snapshot_key="web-1",
        runtime=containers.Runtime(name="io.containerd.runc.v2"),
        extensions={},
        created_at=NOW - timedelta(minutes=5),
    )


def _state(status: Status) -> ProcessState:
    exited = EXITED if status is Status.STOPPED else None
    return ProcessState(container_id="web", exec_id="", pid=42, status=status, exit=exited)


def test_a_pending_restart_reads_as_dockers_restarting() -> None:
    info = taskinfo.build(_record({lbl.RESTART_PENDING: "true"}), _state(Status.STOPPED))
    assert info.restarting
    assert status_text(info, NOW) == "Restarting (137) 7 seconds ago"
    assert state(info) == "restarting"
    assert info.to_json()["restarting"] is True


def test_no_pending_restart_reads_as_exited() -> None:
    info = taskinfo.build(_record({}), _state(Status.STOPPED))
    assert not info.restarting
    assert status_text(info, NOW) == "Exited (137) 7 seconds ago"


def test_a_live_task_is_not_restarting_whatever_the_label() -> None:
    """A supervisor that died between a start and its label update leaves the mark."""
    info = taskinfo.build(_record({lbl.RESTART_PENDING: "true"}), _state(Status.RUNNING))
    assert not info.restarting
    assert status_text(info, NOW).startswith("Up ")


def test_the_last_restart_error_is_in_inspect() -> None:
    why = "network namespace /run/netns/gone does not exist"
    labels = {lbl.RESTART_PENDING: "true", lbl.RESTART_ERROR: why}
    info = taskinfo.build(_record(labels), _state(Status.STOPPED))
    assert info.restart_error == why
    doc = document(info)
    assert doc["State"]["Error"] == why
    assert doc["State"]["Restarting"] is True and doc["State"]["Status"] == "restarting"
    fmt = parse_template("{{.State.Status}} {{.State.Restarting}} {{.State.Error}}")
    assert execute(fmt, doc) == f"restarting true {why}"
    assert taskinfo.build(_record({}), _state(Status.STOPPED)).restart_error is None


def test_a_pending_restart_no_supervisor_serves_says_so_with_doctors_fix(tmp_path: Path) -> None:
    """Issue 36: ``ps`` and ``inspect`` name the missing supervisor, with the fix doctor
    gives; a held presence lock (a supervisor) takes the words away, and a listing with
    nothing restarting never probes the lock."""
    import fcntl

    from ctrexec.doctor import restarts
    from ctrexec.doctor.findings import Scope
    from ctrexec.tasks import supervised

    client: Any = SimpleNamespace(address="/run/x.sock", namespace="ns")
    record = _record({lbl.RESTART_PENDING: "true"})
    waiting = taskinfo.build(record, _state(Status.STOPPED))
    running = taskinfo.build(_record({}), _state(Status.RUNNING))
    said = supervised.annotate(client, [waiting, running], tmp_path)
    assert said[1] == running
    assert status_text(said[0], NOW) == (
        "Restarting (137) 7 seconds ago (no supervisor: run ctrexec supervise)"
    )
    error = document(said[0])["State"]["Error"]
    scope = Scope(client, networks=object(), now=NOW.timestamp())  # type: ignore[arg-type]
    found = restarts.judge(scope, record, live=False, supervised=False)
    assert found is not None and found.what in error and found.fix in error  # one answer

    lock = supervised.lock_path(client, tmp_path)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_SH)  # as a running supervisor holds it
        assert supervised.annotate(client, [waiting], tmp_path) == [waiting]
    assert supervised.annotate(client, [running], tmp_path / "absent") == [running]
