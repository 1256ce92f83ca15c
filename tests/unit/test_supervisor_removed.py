"""A record removed between the supervisor's listing and its restart decision (``rm -f``
of many, issue 40): gone, quietly, and the reconcile (and the event stream it runs in)
goes on with the next container.

The race is one of timing on a real containerd; here the record is made to vanish
exactly between the read of the record and the "restart pending" write.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.tasks import ExitStatus, ProcessState, Status
from ctrexec.errors import NotFound
from ctrexec.groups import supervisor
from ctrexec.groups.supervisor import Supervisor
from ctrexec.tasks import info as taskinfo
from ctrexec.tasks.executor import Executor
from ctrexec.tasks.reports import TaskInfo

pytestmark = pytest.mark.unit

EXITED = ExitStatus(137, datetime(2026, 12, 7, 12, 0, tzinfo=UTC))


def _record(cid: str) -> containers.Container:
    return containers.Container(
        id=cid,
        image="img",
        labels={lbl.MANAGED: "true", lbl.RESTART_POLICY: "always"},
        spec={},
        snapshot_key=cid,
        snapshotter="overlayfs",
        runtime=containers.Runtime(name="io.containerd.runc.v2"),
        created_at=EXITED.exited_at,
        extensions={},
    )


def _stopped(cid: str) -> TaskInfo:
    return taskinfo.build(_record(cid), ProcessState(cid, "", 0, Status.STOPPED, EXITED))


class _Executor:
    def __init__(self) -> None:
        self.client = SimpleNamespace(namespace="ns")

    def list(self, *, all_tasks: bool = False) -> list[TaskInfo]:
        return [_stopped("gone"), _stopped("kept")]


def test_a_record_removed_before_the_restart_pending_write_is_gone_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    removed: set[str] = set()
    pending: list[str] = []

    def get(_client: object, cid: str) -> containers.Container:
        if cid in removed:
            raise NotFound(f"No such container: {cid}")
        if cid == "gone":
            removed.add(cid)  # read once, then removed under the supervisor
        return _record(cid)

    def update_labels(_client: object, cid: str, labels: dict[str, Any]) -> None:
        if cid in removed:
            raise NotFound(f'Containers.Update: container "{cid}": not found')
        pending.append(cid)

    fake = SimpleNamespace(get=get, update_labels=update_labels)
    monkeypatch.setattr(supervisor, "containers", fake)
    sup = Supervisor(cast(Executor, _Executor()), boot_time=lambda: 0.0)
    monkeypatch.setattr(sup, "_schedule", lambda *_a: False)  # no restart is run here
    caplog.set_level(logging.DEBUG, logger="ctrexec.groups.supervisor")
    sup.reconcile()  # raised NotFound before: the event stream it runs in ended
    assert pending == ["kept"]  # the next container was still handled
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
