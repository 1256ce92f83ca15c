"""The rules of the containerd and file checks, without a daemon: which container,
lease, snapshot, cgroup and socket directory is garbage, and prune's filters."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ctrexec import labels as lbl
from ctrexec.cli.doctor import container_filter
from ctrexec.containerd.bundles import SHIM_SOCKET_DIR, shim_socket
from ctrexec.containerd.client import LEASE_EXPIRE_LABEL, Lease
from ctrexec.containerd.containers import Container, Runtime
from ctrexec.containerd.snapshots import SnapshotInfo
from ctrexec.containerd.tasks import ExitStatus, ProcessState, Status
from ctrexec.defaults import NOMAD_SOCKET_DIR_PREFIX, NOMAD_SOCKET_NAME
from ctrexec.doctor import cgroups, containers, nomadsockets, snapshots
from ctrexec.doctor.findings import Scope
from ctrexec.doctor.prune import ContainerFilter
from ctrexec.errors import InvalidArgument

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
OLD = NOW - timedelta(hours=1)
YOUNG = NOW - timedelta(seconds=10)


class _Client:
    namespace = "ns"


def _scope(grace: float = 300.0, now: float = NOW.timestamp()) -> Scope:
    client: Any = _Client()
    return Scope(client, networks=object(), grace=grace, now=now)  # type: ignore[arg-type]


def _record(created: datetime = OLD, **labels: str) -> Container:
    return Container(
        id="c1",
        image="img",
        labels={lbl.MANAGED: "true", **labels},
        spec={},
        snapshotter="overlayfs",
        snapshot_key="c1",
        runtime=Runtime("io.containerd.runc.v2"),
        extensions={},
        created_at=created,
    )


def _task(status: Status, exited: datetime | None = None) -> ProcessState:
    ended = ExitStatus(0, exited) if exited else None
    return ProcessState("c1", "", 42, status, ended)


RM = {lbl.AUTO_REMOVE: "true"}
STARTED = {lbl.RUN_ID: "1", lbl.RUN_STARTED_AT: OLD.isoformat()}


def test_a_rm_container_whose_run_ended_long_ago_is_garbage() -> None:
    found = containers.judge(_scope(), _record(**RM, **STARTED), None, True)
    assert found is not None and found.where == "c1" and found.fix == "ctrexec rm --namespace ns c1"
    stopped = _task(Status.STOPPED, exited=OLD)
    assert containers.judge(_scope(), _record(**RM, **STARTED), stopped, True) is not None


def test_a_rm_container_is_kept_while_running_young_or_about_to_restart() -> None:
    assert containers.judge(_scope(), _record(**RM), _task(Status.RUNNING), True) is None
    young_exit = _task(Status.STOPPED, exited=YOUNG)
    assert containers.judge(_scope(), _record(**RM, **STARTED), young_exit, True) is None
    young_run = {lbl.RUN_ID: "1", lbl.RUN_STARTED_AT: YOUNG.isoformat()}
    assert containers.judge(_scope(), _record(**RM, **young_run), None, True) is None
    pending = {lbl.RESTART_PENDING: "true"}
    assert containers.judge(_scope(), _record(**RM, **STARTED, **pending), None, True) is None


def test_the_users_stopped_container_and_nomads_are_kept() -> None:
    assert containers.judge(_scope(), _record(**STARTED), None, True) is None
    assert containers.judge(_scope(), _record(), None, True) is None  # created, never started
    nomad = {lbl.NOMAD_TASK_ID: "a/b/c"}
    assert containers.judge(_scope(), _record(**RM, **nomad), None, True) is None


def test_a_create_that_never_finished_is_garbage_once_old() -> None:
    assert containers.judge(_scope(), _record(), None, has_rootfs=False) is not None
    assert containers.judge(_scope(), _record(created=YOUNG), None, has_rootfs=False) is None
    assert containers.judge(_scope(grace=0), _record(created=YOUNG), None, False) is not None


def _lease(lid: str = "ctrexec-1", created: datetime = OLD, **labels: str) -> Lease:
    return Lease(id=lid, labels=labels, created_at=created)


def test_leases_past_expiry_or_without_one_are_garbage_ctrexecs_only() -> None:
    past = {LEASE_EXPIRE_LABEL: (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    future = {LEASE_EXPIRE_LABEL: (NOW + timedelta(minutes=50)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert snapshots.stale_lease(_scope(), _lease(**past)) is not None
    assert snapshots.stale_lease(_scope(grace=0), _lease(**future)) is None  # in flight
    assert snapshots.stale_lease(_scope(), _lease()) == OLD  # no expiry, old
    assert snapshots.stale_lease(_scope(), _lease(created=YOUNG)) is None
    assert snapshots.stale_lease(_scope(), _lease("other-tool")) is None
    unreadable = {LEASE_EXPIRE_LABEL: "soon"}
    assert snapshots.stale_lease(_scope(grace=0), _lease(**unreadable)) is None


def test_loose_snapshots_are_active_or_view_and_named_by_nothing() -> None:
    def info(kind: str, **labels: str) -> SnapshotInfo:
        return SnapshotInfo("k", "", kind, labels, OLD)

    assert snapshots.loose(info("active"), "overlayfs", set())
    assert snapshots.loose(info("view"), "overlayfs", set())
    assert not snapshots.loose(info("committed"), "overlayfs", set())
    assert not snapshots.loose(info("active"), "overlayfs", {("overlayfs", "k")})
    assert snapshots.loose(info("active"), "overlayfs", {("native", "k")})
    assert not snapshots.loose(info("active", **{snapshots.GC_ROOT_LABEL: "x"}), "overlayfs", set())


def test_cgroups_empty_and_of_no_record_in_the_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "pids"
    for leaf in ("gone", "held", "busy"):
        (tree / "ctrexec" / "ns" / leaf).mkdir(parents=True)
        (tree / "ctrexec" / "ns" / leaf / "cgroup.procs").write_text("")
    (tree / "ctrexec" / "ns" / "busy" / "cgroup.procs").write_text("123\n")
    (tree / "ctrexec" / "other" / "gone").mkdir(parents=True)
    scope = _scope(grace=0)
    monkeypatch.setattr(cgroups.files, "owned", lambda s: ({"ns"}, {("ns", "held")}))
    monkeypatch.setattr(cgroups, "_why_spared", lambda s, c: None)
    found = cgroups.find(scope, [tmp_path, tree])
    assert [f.where for f in found] == ["/ctrexec/ns/gone"]
    assert cgroups.unowned("/ctrexec/other", {"other"}, set(), empty=True)
    assert not cgroups.unowned("/ctrexec/ns", {"ns"}, {("ns", "held")}, empty=True)


def test_dead_nomad_socket_dirs_only(tmp_path: Path) -> None:
    dead = tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}dead"
    dead.mkdir()
    (dead / NOMAD_SOCKET_NAME).touch()
    (tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}busy").mkdir()
    (tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}busy" / "other-file").touch()
    live = tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}live"
    live.mkdir()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(live / NOMAD_SOCKET_NAME))
        server.listen()
        found = nomadsockets.find(_scope(grace=0, now=time.time()), tmp_path)
    assert [f.where for f in found] == [str(dead)]
    young = nomadsockets.find(_scope(now=time.time()), tmp_path)
    assert young == []  # just made: younger than the grace period


def test_shim_socket_is_containerds_naming() -> None:
    # Seen from containerd-shim-runc-v2 start (containerd 1.6) for these three values.
    want = "d7c904c631429a1aafc08d70472e2e39e82a3ef8aab8b020aba62777f03b239f"
    assert shim_socket("/tmp/dctr-nonexist.sock", "dctr-try", "dctr-x") == SHIM_SOCKET_DIR / want


def test_container_prune_filters() -> None:
    where = container_filter(["label=a", "label=b=2", "label!=c", "until=1h"])
    assert where.labels == ("a", "b=2") and where.not_labels == ("c",)
    assert where.until is not None
    assert where.matches(_record(a="", b="2"))
    assert not where.matches(_record(a="", b="3"))
    assert not where.matches(_record(a="", b="2", c="x"))
    assert not where.matches(_record(created=datetime.now(UTC), a="", b="2"))
    assert ContainerFilter().matches(_record())
    for bad in ("bogus", "label=", "until=tomorrow", "name=x"):
        with pytest.raises(InvalidArgument, match="invalid filter"):
            container_filter([bad])


def test_a_pending_restart_nobody_makes_is_named_with_its_fix() -> None:
    """Issue 36: the mark with no supervisor, or overdue under one; not while due."""
    from ctrexec.doctor import restarts

    due = (NOW - timedelta(seconds=5)).isoformat()
    pending = _record(**{lbl.RESTART_PENDING: "true", lbl.RESTART_DUE: due})
    alone = restarts.judge(_scope(), pending, live=False, supervised=False)
    assert alone is not None and not alone.garbage and alone.where == "c1"
    assert "no supervisor" in alone.what and "ctrexec start --namespace ns c1" in alone.fix
    assert restarts.judge(_scope(), pending, live=False, supervised=True) is None  # due now
    late = (NOW - timedelta(seconds=restarts.OVERDUE + 1)).isoformat()
    failing = {lbl.RESTART_PENDING: "true", lbl.RESTART_DUE: late, lbl.RESTART_ERROR: "boom"}
    stalled = restarts.judge(_scope(), _record(**failing), live=False, supervised=True)
    assert stalled is not None and "not progressing" in stalled.what and "boom" in stalled.what
    assert restarts.judge(_scope(), pending, live=True, supervised=False) is None
    assert restarts.judge(_scope(), _record(), live=False, supervised=False) is None
