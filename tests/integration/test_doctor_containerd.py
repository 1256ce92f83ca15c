"""``doctor`` and ``gc``'s containerd and file checks, and ``container``/``system prune``,
through the real CLI.

One test plants a leftover of every kind at once (the CI time of one pass): a ``run
-d --rm`` container that nothing removed, a create cut short before its rootfs, a shim serving no task, a loose snapshot and
a lease without expiry, a log and a host-files directory with no record, an empty
cgroup and a dead Nomad plugin's socket directory. It also plants what gc must leave:
a plain stopped container, a lease in flight, and another namespace's lease and files.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import create_namespace, stopped, until

from ctrexec import _rpc, owners
from ctrexec._api.containerd.services.snapshots.v1 import snapshots_pb2
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.defaults import NOMAD_SOCKET_DIR_PREFIX, NOMAD_SOCKET_NAME
from ctrexec.doctor import shims
from ctrexec.errors import NotFound
from ctrexec.net import hostfiles

#: The kinds this module's checks report.
KINDS = {"container", "shim", "lease", "snapshot", "logdir", "hostfiles", "cgroup", "nomad-socket"}
OTHER_NS = "dctr-other"
CGROUP = Path("/sys/fs/cgroup/pids/ctrexec", TEST_NAMESPACE, "dctr-cg")


def _doctor(cli: Cli, logs: Path) -> list[dict[str, object]]:
    """This module's kinds of what doctor finds (other checks' findings are theirs;
    the exit code is judged on all of them: 1 with any finding, 0 with none)."""
    out = cli("doctor", "--json", "--grace", "0", "--log-dir", str(logs))
    every = json.loads(out.stdout)
    assert out.returncode == (1 if every else 0), out.stderr
    return [f for f in every if f["Kind"] in KINDS]


@contextlib.contextmanager
def _shim(address: str, where: Path) -> Iterator[int]:
    """A shim started as containerd starts one, for a task containerd never heard of
    (what a client killed while containerd starts a shim leaves): its pid."""
    bundle = where / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text("{}")
    os.mkfifo(bundle / "log")
    log = os.open(bundle / "log", os.O_RDONLY | os.O_NONBLOCK)
    argv = ["containerd-shim-runc-v2", "-namespace", TEST_NAMESPACE, "-address", address]
    argv += ["-publish-binary", shutil.which("containerd") or "containerd", "-id", "dctr-shim"]
    subprocess.run([*argv, "start"], cwd=bundle, check=True, capture_output=True, timeout=30)
    # This run's shim: the matrix runs of scripts/test plant theirs at once, one pid
    # namespace, each with its own containerd's address.
    ours = (b"dctr-shim", address.encode())
    pid = next(
        p for p, (_, a) in shims.orphaned_shims.processes().items() if all(w in a for w in ours)
    )
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(log)


@pytest.fixture
def other(client: Client) -> Iterator[Client]:
    ns = client.with_namespace(OTHER_NS)
    create_namespace(ns)
    yield ns
    for lease in ns.leases():
        ns.delete_lease(lease.id)
    ns.delete_namespace()


def _plant_files(logs: Path, tmp: Path, client: Client) -> list[Path]:
    """Leftovers of this containerd's namespace: owned as ctrexec records it (gc
    spares what has no owner recorded), and another namespace's."""
    for task in ("dctr-gone", CGROUP.name):
        record = owners.task_record(None, TEST_NAMESPACE, task)
        owners.write(record, owners.Owner(client.address, TEST_NAMESPACE, task))
    planted = []
    for ns in (TEST_NAMESPACE, OTHER_NS):
        log = logs / ns / "dctr-gone" / "task.log"
        log.parent.mkdir(parents=True)
        log.write_text("{}\n")
        files = hostfiles.task_dir(hostfiles.DEFAULT_DIR, ns, "dctr-gone").directory
        files.mkdir(parents=True)
        (files / "hosts").write_text("127.0.0.1 localhost\n")
        planted += [log.parent, files]
    nomad = Path(tempfile.mkdtemp(prefix=NOMAD_SOCKET_DIR_PREFIX, dir=tmp))
    (nomad / NOMAD_SOCKET_NAME).touch()  # a dead plugin's socket file: nobody listens
    CGROUP.mkdir(parents=True)
    return [*planted, nomad, CGROUP]


def test_doctor_finds_every_kind_dry_run_changes_nothing_gc_removes_it(
    cli: Cli, client: Client, other: Client, test_image: str, tmp_path: Path,
    containerd_address: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    logs = tmp_path / "logs"
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the CLI's tempfile dir: Nomad's sockets
    assert _doctor(cli, logs) == []
    for name, rm in (("dctr-rm", ["--rm"]), ("dctr-plain", [])):
        out = cli("run", "-d", *rm, "--name", name, test_image, "true")
        assert out.returncode == 0, out.stderr
    until(lambda: stopped(client, "dctr-rm") and stopped(client, "dctr-plain"), "both exits")
    # A create killed between its record and its rootfs snapshot: the record alone.
    out = cli("create", "--name", "dctr-half", test_image, "true")
    assert out.returncode == 0, out.stderr
    half = containers.get(client, "dctr-half")
    snapshots.remove_snapshot(client, half.snapshot_key, half.snapshotter)
    # That deletion schedules containerd's GC, which would collect the loose snapshot
    # planted next: a synchronous collection now is the one it asked for.
    client.delete_lease(client.create_lease(ttl=None).id, sync=True)
    loose = client.create_lease(ttl=None)
    in_flight = client.create_lease(ttl=timedelta(hours=1))
    other.create_lease(ttl=None)
    client._call(
        _rpc.SNAPSHOTS,
        "Prepare",
        snapshots_pb2.PrepareSnapshotRequest(snapshotter="overlayfs", key="dctr-loose"),
        snapshots_pb2.PrepareSnapshotResponse,
    )
    paths = _plant_files(logs, tmp_path, client)
    with _shim(containerd_address, tmp_path) as shim:
        try:
            _check_and_collect(cli, client, logs, loose.id, shim, paths)
            # gc left alone: the plain stopped container, the lease in flight, the
            # other namespace's lease and files.
            assert stopped(client, "dctr-plain")
            assert {le.id for le in client.leases()} == {in_flight.id}
            assert len(other.leases()) == 1
            assert paths[2].exists() and paths[3].exists()  # OTHER_NS's log and files dirs
        finally:
            cli("rm", "-f", "dctr-rm", "dctr-plain", "dctr-half")
            for lease in (in_flight, loose):
                with contextlib.suppress(NotFound):
                    client.delete_lease(lease.id)
            snapshots.remove_snapshot(client, "dctr-loose")
            for path in paths:
                with contextlib.suppress(OSError):
                    path.rmdir() if path == CGROUP else shutil.rmtree(path)
            for ns in (TEST_NAMESPACE, OTHER_NS):
                with contextlib.suppress(OSError):
                    (logs / ns).rmdir()
            for task in ("dctr-gone", CGROUP.name):
                owners.forget(owners.task_record(None, TEST_NAMESPACE, task))


def _check_and_collect(
    cli: Cli, client: Client, logs: Path, lease: str, shim: int, paths: list[Path]
) -> None:
    expected = {
        ("container", "dctr-rm"),
        ("container", "dctr-half"),
        ("shim", f"pid {shim}"),
        ("lease", lease),
        ("snapshot", "dctr-loose"),
        ("logdir", str(paths[0])),
        ("hostfiles", str(paths[1])),
        ("nomad-socket", str(paths[4])),
        ("cgroup", f"/ctrexec/{TEST_NAMESPACE}/dctr-cg"),
    }
    found = _doctor(cli, logs)
    assert expected <= {(f["Kind"], f["Where"]) for f in found}, [
        (f["Kind"], f["Where"], f["What"]) for f in found
    ]
    dry = cli("gc", "--dry-run", "--json", "--grace", "0", "--log-dir", str(logs))
    assert dry.returncode == 0, dry.stderr
    listed = {(f["Kind"], f["Where"]) for f in json.loads(dry.stdout)["Removed"]}
    assert expected <= listed
    assert {(f["Kind"], f["Where"]) for f in _doctor(cli, logs)} >= expected  # nothing changed
    out = cli("gc", "--grace", "0", "--log-dir", str(logs))
    assert out.returncode == 0, out.stderr
    until(lambda: _doctor(cli, logs) == [], "doctor clean after gc", timeout=15)
    assert tasks.find(client, "dctr-rm") is None
    assert not any(c.id in ("dctr-rm", "dctr-half") for c in containers.list_containers(client))
    assert not CGROUP.exists() and not paths[0].exists() and not paths[4].exists()


def test_gc_spares_the_young_and_prune_removes_stopped_containers_only(
    cli: Cli, client: Client, test_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTREXEC_BRIDGE", "dctr0")  # system prune's network: none of ours
    monkeypatch.setenv("CTREXEC_SUBNET", "10.231.211.0/24")
    logs = tmp_path / "logs"
    runs = [
        ("dctr-young", ["--rm"], "true"),
        ("dctr-label", ["--label", "dctr=1"], "true"),
        ("dctr-up", [], "sleep 60"),
        ("dctr-sys", [], "true"),
    ]
    try:
        for name, flags, command in runs:
            out = cli("run", "-d", *flags, "--name", name, test_image, *command.split())
            assert out.returncode == 0, out.stderr
        done = ("dctr-young", "dctr-label", "dctr-sys")
        until(lambda: all(stopped(client, n) for n in done), "three exits")
        out = cli("gc", "--json", "--log-dir", str(logs))  # the default grace: 300 s
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["Removed"] == []
        out = cli("container prune", "--filter", "bogus")
        assert out.returncode == 125 and "invalid filter 'bogus'" in out.stderr, out.stderr
        out = cli("container prune", "-f", "--filter", "label=dctr=1")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[:3] == ["Deleted Containers:", "dctr-label", ""], out.stdout
        assert lines[3].startswith("Total reclaimed space: "), out.stdout
        out = cli("container prune", "--json", "--filter", "label!=dctr")
        assert out.returncode == 0, out.stderr
        assert sorted(json.loads(out.stdout)["ContainersDeleted"]) == ["dctr-sys", "dctr-young"]
        assert tasks.find(client, "dctr-up").status is Status.RUNNING  # type: ignore[union-attr]
        out = cli("run", "-d", "--name", "dctr-sys", test_image, "true")
        assert out.returncode == 0, out.stderr
        until(lambda: stopped(client, "dctr-sys"), "its exit")
        out = cli("system prune", "-f", "--log-dir", str(logs))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("Deleted Containers:\ndctr-sys\n\n"), out.stdout
        assert "Total reclaimed space: " in out.stdout
        assert tasks.find(client, "dctr-up").status is Status.RUNNING  # type: ignore[union-attr]
    finally:
        cli("rm", "-f", *(name for name, _, _ in runs))
