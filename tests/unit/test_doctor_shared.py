"""One doctor run lists each namespace once and reads the host's processes once
(issue 40); gc lists afresh after each removal, so a later check sees it."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from ctrexec import labels as lbl
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.tasks import ProcessState, Status
from ctrexec.doctor import containers as doctor_containers
from ctrexec.doctor import integrity, restarts, shims
from ctrexec.doctor.checks import doctor, gc
from ctrexec.doctor.findings import Check, Finding, Scope, every_record
from ctrexec.logs import orphaned_shims
from ctrexec.tasks import logkeeper

NOW = 1_000_000.0
NS, OTHER = "ns-a", "ns-b"
ADDRESS = "/run/test/containerd.sock"
MANAGED = containers.label_filter(lbl.MANAGED)


def _record(cid: str, managed: bool = True) -> containers.Container:
    return containers.Container(
        id=cid,
        image="docker.io/library/busybox:latest",
        labels={lbl.MANAGED: "true"} if managed else {"other": "x"},
        spec={},
        snapshotter="overlayfs",
        snapshot_key=cid,
        runtime=containers.Runtime(name="io.containerd.runc.v2"),
        extensions={},
        created_at=None,
    )


@attrs.define
class _Client:
    """The calls the shared listings make of a client: its namespace, the daemon's."""

    namespace: str
    address: str = ADDRESS

    def namespaces(self) -> list[str]:
        return [NS, OTHER]

    def with_namespace(self, ns: str) -> _Client:
        return _Client(ns)


@attrs.define
class _Daemon:
    """containerd's records by namespace, and every List made of them."""

    records: dict[str, list[containers.Container]]
    lists: list[tuple[str, tuple[str, ...]]] = attrs.field(factory=list)

    def list_containers(self, client: _Client, *filters: str) -> list[containers.Container]:
        self.lists.append((client.namespace, filters))
        found = self.records[client.namespace]
        if filters == ():
            return list(found)
        assert filters == (MANAGED,), filters  # the only filter doctor still sends
        return [r for r in found if lbl.MANAGED in r.labels]


def _shim(task_id: str) -> list[bytes]:
    return [b"/usr/bin/containerd-shim-runc-v2", b"-namespace", NS.encode(), b"-id",
            task_id.encode(), b"-address", ADDRESS.encode()]  # fmt: skip


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> _Daemon:
    fake = _Daemon({NS: [_record("a"), _record("plain", managed=False)], OTHER: [_record("b")]})
    monkeypatch.setattr(containers, "list_containers", fake.list_containers)
    # Task "a" runs as pid 11, the child of shim 10; shim 20 serves nothing.
    running = {"a": ProcessState("a", "", 11, Status.RUNNING, None)}
    monkeypatch.setattr(
        tasks, "states_of", lambda client, ids, **kw: {i: running[i] for i in ids if i in running}
    )
    return fake


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The host's process table and each shim's sockets; what was read, in order."""
    reads: list[str] = []
    table = {10: (1, _shim("a")), 11: (10, [b"sh"]), 20: (1, _shim("old")), 30: (1, [b"sleep"])}

    def processes() -> dict[int, tuple[int, list[bytes]]]:
        reads.append("processes")
        return table

    def sockets_of(pid: int, listening: dict[int, Path]) -> set[Path]:
        reads.append(f"fds of {pid}")
        return {Path(f"/run/containerd/s/{pid}")}

    monkeypatch.setattr(orphaned_shims, "processes", processes)
    monkeypatch.setattr(shims, "listening_sockets", dict)
    monkeypatch.setattr(shims, "_sockets_of", sockets_of)
    monkeypatch.setattr(shims, "_started", lambda pid: NOW - 1000)
    return reads


def _scope() -> Scope:
    client: object = _Client(NS)
    return Scope(client, networks=object(), now=NOW)  # type: ignore[arg-type]


def _every_check() -> Check:
    """A check that reads every namespace's records, as netside's and netstate's do."""
    return Check(
        "every",
        lambda s: [Finding("every", f"{ns}/{r.id}", "listed", "-") for ns, r in every_record(s)],
    )


CHECKS = (
    doctor_containers.CHECK,
    shims.CHECK,
    integrity.GROUPS,
    restarts.CHECK,
    _every_check(),
)


def test_one_doctor_run_lists_each_namespace_once_and_reads_processes_once(
    daemon: _Daemon, host: list[str]
) -> None:
    scope = _scope()
    found = doctor(scope, CHECKS)
    assert [(f.kind, f.where) for f in found] == [
        ("shim", "pid 20"),
        ("every", f"{NS}/a"),
        ("every", f"{OTHER}/b"),
    ]
    # The scope's namespace once, unfiltered (the managed subset is taken from it); the
    # other namespace once, by the label.
    assert daemon.lists == [(NS, ()), (OTHER, (MANAGED,))]
    # One scan of the processes; only the shim no listed task is a child of had its fds read.
    assert host == ["processes", "fds of 20"]

    doctor(scope, CHECKS)  # a second run on the same scope reads everything again
    assert daemon.lists == [(NS, ()), (OTHER, (MANAGED,))] * 2
    assert host == ["processes", "fds of 20"] * 2


def test_gc_lists_afresh_after_a_removal_so_the_next_check_sees_it(daemon: _Daemon) -> None:
    daemon.records[NS].append(_record("dead"))
    logs = {"a", "dead"}

    def remove_container(scope: Scope, finding: Finding) -> None:
        daemon.records[NS] = [r for r in daemon.records[NS] if r.id != finding.where]

    def unowned_logs(scope: Scope) -> list[Finding]:
        owned = {r.id for r in scope.managed()}
        return [Finding("log", name, "no record", "gc") for name in sorted(logs - owned)]

    dead = Check(
        "container",
        lambda s: [Finding("container", r.id, "dead", "gc") for r in s.managed() if r.id == "dead"],
        remove_container,
    )
    log = Check("log", unowned_logs, lambda s, f: logs.discard(f.where))
    report = gc(_scope(), checks=(dead, log))
    assert [(f.kind, f.where) for f in report.removed] == [("container", "dead"), ("log", "dead")]
    assert logs == {"a"} and report.failed == []
    assert daemon.lists == [(NS, ()), (NS, ())]  # the second one after the removal


def test_gc_without_removals_lists_once(daemon: _Daemon) -> None:
    both = (_every_check(), _every_check())
    report = gc(_scope(), checks=both)
    assert report.removed == [] and report.failed == []
    assert daemon.lists == [(NS, ()), (OTHER, (MANAGED,))]


def test_the_log_daemons_recovery_takes_the_shared_records_as_its_filter_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """doctor's logdaemon check hands revive the run's records: the same ones as its own
    List by ``managed=="true"`` (the value exactly), and no List of its own."""

    def no_list(client: object, *filters: str) -> list[containers.Container]:
        raise AssertionError(f"listed again: {filters}")

    cfg = attrs.make_class("Cfg", {"log_max_size": attrs.field(default=7),
                                   "log_max_files": attrs.field(default=3)})()  # fmt: skip
    monkeypatch.setattr(containers, "list_containers", no_list)
    monkeypatch.setattr(logkeeper, "config_of", lambda record: cfg)
    monkeypatch.setattr(logkeeper, "uses_daemon", lambda config: True)

    def record(cid: str, managed: str | None) -> containers.Container:
        labels = {lbl.LOG_PATH: f"/logs/{cid}"} | (
            {} if managed is None else {lbl.MANAGED: managed}
        )
        return attrs.evolve(_record(cid), labels=labels)

    listed = [record("a", "true"), record("b", "false"), record("c", None)]
    assert logkeeper._logs(object(), lambda: listed) == [("/logs/a", 7, 3)]  # type: ignore[arg-type]
