"""Members deleted outside ctrexec, without a daemon: which are missing, the line that
says so, which directories are theirs to remove, and the stream's deletion event."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ctrexec import Groups
from ctrexec import labels as lbl
from ctrexec.containerd import containers
from ctrexec.containerd.events import RecordChanged, TaskDeleted, TaskStarted
from ctrexec.errors import NotFound
from ctrexec.groups import missing
from ctrexec.net import hostfiles
from ctrexec.tasks import files as taskfiles
from ctrexec.tasks.events import EventFilter, ExitLedger, RecordDeleted, TaskEvents

MEMBERS = hostfiles.format_members(
    [hostfiles.Member("web-srv", "srv", "web"), hostfiles.Member("web-cli", "cli", "web")]
)


def _record(cid: str, labels: dict[str, str]) -> containers.Container:
    return containers.Container(
        id=cid,
        image="docker.io/library/busybox:latest",
        labels={lbl.MANAGED: "true", **labels},
        spec={},
        snapshotter="overlayfs",
        snapshot_key=cid,
        runtime=containers.Runtime(name="io.containerd.runc.v2"),
        extensions={},
        created_at=None,
    )


def test_a_member_the_others_name_without_a_record_is_missing() -> None:
    cli = _record("web-cli", {lbl.GROUP: "web", lbl.GROUP_MEMBERS: MEMBERS})
    assert missing.missing([cli]) == ["web-srv"]
    srv = _record("web-srv", {lbl.GROUP: "web", lbl.GROUP_MEMBERS: MEMBERS})
    assert missing.missing([cli, srv]) == []
    assert missing.missing([]) == []


def test_the_report_names_the_group_the_member_and_the_repair() -> None:
    assert missing.report("web", "web-srv") == (
        "group web: member web-srv was deleted outside ctrexec; "
        "run `ctrexec group up FILE` to re-create it"
    )
    # the public call a front end shows it with says the supervisor's and doctor's words
    assert Groups.missing_message("web", "web-srv") == missing.report("web", "web-srv")


def test_roots_are_taken_only_from_labels_that_name_the_ids_own_paths(tmp_path: Path) -> None:
    log = taskfiles.log_path(tmp_path / "logs", "ns", "web-srv")
    files = hostfiles.task_dir(tmp_path / "files", "ns", "web-srv").directory
    own = {lbl.LOG_PATH: str(log), lbl.HOSTFILES_DIR: str(files)}
    assert taskfiles.roots_of(own, "ns", "web-srv") == (tmp_path / "logs", tmp_path / "files")
    # Another id's, another namespace's, a path of no scheme, no label: nothing.
    assert taskfiles.roots_of(own, "ns", "web-cli") == (Path(), Path())
    assert taskfiles.roots_of(own, "other", "web-srv") == (Path(), Path())
    odd = {lbl.LOG_PATH: "/task.log", lbl.HOSTFILES_DIR: "/etc"}
    assert taskfiles.roots_of(odd, "ns", "web-srv") == (Path(), Path())
    assert taskfiles.roots_of({}, "ns", "web-srv") == (Path(), Path())


class _Client:
    namespace = "ns"

    def __init__(self, present: set[str]) -> None:
        self.present = present


def _fake_get(client: _Client, cid: str) -> object:
    if cid not in client.present:
        raise NotFound(f"container {cid} not found")
    return object()


def _dirs(tmp_path: Path, cid: str) -> tuple[Path, Path]:
    log = taskfiles.log_path(tmp_path / "logs", "ns", cid)
    log.parent.mkdir(parents=True)
    log.write_text("x")
    files = hostfiles.task_dir(tmp_path / "files", "ns", cid).directory
    files.mkdir(parents=True)
    return log.parent, files


def test_only_a_gone_records_own_dirs_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containers, "get", _fake_get)
    gone_log, gone_files = _dirs(tmp_path, "web-srv")
    kept_log, kept_files = _dirs(tmp_path, "web-cli")
    client: Any = _Client({"web-cli"})
    roots = {"log_roots": [tmp_path / "logs"], "files_bases": [tmp_path / "files", Path()]}
    for cid in ("web-cli", "web-srv"):  # the living one first: nothing of it goes
        taskfiles.remove_orphaned(client, cid, **roots, state_dir=tmp_path / "state")
    assert not gone_log.exists() and not gone_files.exists()
    assert kept_log.exists() and kept_files.exists()
    # Once removed, nothing is left to remove (and to report).
    assert taskfiles.remove_orphaned(client, "web-srv", **roots, state_dir=None) == []


def _stream(deletions: bool, known: dict[str, Any]) -> TaskEvents:
    stream = TaskEvents.__new__(TaskEvents)  # no daemon: only what a record change reads
    stream._client = SimpleNamespace(namespace="ns")  # type: ignore[assignment]
    stream._deletions = deletions
    stream._records = dict(known)
    stream._ledger = ExitLedger()
    stream.filter = EventFilter()
    return stream


def test_a_stream_with_deletions_yields_a_managed_records_deletion_with_its_labels() -> None:
    labels = {lbl.MANAGED: "true", lbl.GROUP: "web"}
    change = RecordChanged(container_id="web-srv", deleted=True)
    [event] = _stream(True, {"web-srv": labels})._record_changed(change)
    assert isinstance(event, RecordDeleted)
    assert (event.task_id, event.group, dict(event.labels)) == ("web-srv", "web", labels)
    # Not asked for, not ours, or not known: nothing.
    assert _stream(False, {"web-srv": labels})._record_changed(change) == []
    assert _stream(True, {"web-srv": None})._record_changed(change) == []
    assert _stream(True, {})._record_changed(change) == []


def test_a_records_deletion_first_yields_the_delete_its_task_never_sent() -> None:
    labels = {lbl.MANAGED: "true", lbl.GROUP: "web"}
    stream = _stream(True, {"web-srv": labels})
    stream._ledger.note_task(TaskStarted(task_id="web-srv", namespace="ns", pid=7))
    deleted, gone = stream._record_changed(RecordChanged(container_id="web-srv", deleted=True))
    assert isinstance(deleted, TaskDeleted) and isinstance(gone, RecordDeleted)
    assert (deleted.task_id, deleted.pid, deleted.inferred) == ("web-srv", 7, True)
