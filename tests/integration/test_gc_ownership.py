"""gc removes only what ctrexec owns, and never what is being made (issue 36, item 4).

Two cases, through the real binary for every create and removal:

- ``gc --grace 0`` in a loop beside two loops of ``run -d -p`` + ``rm -f``: every
  create succeeds, and each container runs in the pin that ``run`` made (checked from
  the kernel: the task's network namespace is the pin's), so gc took no pin of a
  create in flight (:mod:`ctrexec.inflight`).
- a second, private containerd with the same namespace name, with a running and a
  stopped ``run -p`` container (each a one-task group: pin, log and host-files
  directories, cgroup): gc against the session's containerd, at the default grace and
  at ``--grace 0``, removes none of them (:mod:`ctrexec.owners`).

And a network attachment's CNI result and host-local reservation, each named by its
owner record (:func:`ctrexec.owners.attachment_record`):

- the other containerd's, its pin unmounted behind ctrexec's back (so that only the
  record says whose it is), survive ``gc --grace 0``;
- a reservation another tool wrote (an id ctrexec never made) is spared, and gc's
  report and doctor name it with the reason;
- ctrexec's own, its container record deleted and its pin unmounted behind its back,
  is still removed (a CNI DEL: result, reservation and owner record go).

The gc is the library's (what the CLI's ``gc`` runs), with its findings narrowed to
this test's tag: a host-wide gc of the old code would judge every ``cx-`` namespace
on this shared machine against the session's containerd alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _cli import TEST_NAMESPACE, Cli
from _nethelpers import cli_bridge
from _support import stopped as exited
from _support import until

from ctrexec import owners
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.doctor import checks
from ctrexec.doctor.findings import Check, Finding, Scope
from ctrexec.doctor.netstate import CNI_RESULT, IPAM
from ctrexec.ids import task_cgroup
from ctrexec.net import hostfiles, ipamstore, netns, nsmarks, settings
from ctrexec.testing import import_image, private_containerd

pytestmark = pytest.mark.integration

SUBNET = "10.231.219.0/24"
ROUNDS = 15
LOOPS = 2


@pytest.fixture
def bridge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    with cli_bridge(monkeypatch, tmp_path, SUBNET) as name:
        yield name


def _narrowed(tag: str) -> tuple[Check, ...]:
    """Every check of gc, its findings narrowed to this test's objects."""

    def only_mine(check: Check) -> Check:
        def find(scope: Scope) -> list[Finding]:
            return [f for f in check.find(scope) if tag in f.where or tag in f.ref]

        return attrs.evolve(check, find=find)

    return tuple(only_mine(c) for c in checks.CHECKS)


def _pin(name: str) -> str:
    return f"{netns.NETNS_RUN_DIR}/cx-{name}"


def _in_its_pin(client: Client, name: str) -> bool:
    """Whether the task runs, inside the namespace its pin holds (the kernel's word)."""
    state = tasks.find(client, name)
    if state is None or state.status is not Status.RUNNING or not state.pid:
        return False
    try:
        return os.stat(f"/proc/{state.pid}/ns/net").st_ino == os.stat(_pin(name)).st_ino
    except OSError:
        return False


def test_gc_grace_0_in_a_loop_beside_run_p_and_rm_breaks_no_create(
    cli: Cli, client: Client, test_image: str, bridge: str, tmp_path: Path
) -> None:
    tag = f"gcl{secrets.token_hex(2)}"
    scope_of = lambda: Scope(  # noqa: E731 -- a new "now" for each pass
        client, networks=settings.from_env(), log_dir=tmp_path / "logs", grace=0
    )
    narrowed = _narrowed(tag)
    stop = threading.Event()
    passes: list[int] = []
    removed: list[str] = []

    def collect() -> None:
        while not stop.is_set():
            report = checks.gc(scope_of(), checks=narrowed)
            removed.extend(f"{f.kind} {f.where}" for f in report.removed)
            passes.append(1)

    failed: list[str] = []
    broken: list[str] = []

    def create_and_remove(loop: int) -> None:
        for i in range(ROUNDS):
            name = f"{tag}-{loop}-{i}"
            out = cli("run", "-d", "-p", "8080", "--name", name, test_image, "sleep", "600")
            if out.returncode != 0:
                failed.append(f"{name}: {out.stderr.strip()}")
            elif not _in_its_pin(client, name):
                broken.append(f"{name}: not running in {_pin(name)}")
            out = cli("rm", "-f", name)
            if out.returncode != 0 and "No such container" not in out.stderr:
                failed.append(f"rm {name}: {out.stderr.strip()}")

    gc_thread = threading.Thread(target=collect, daemon=True)
    gc_thread.start()
    try:
        loops = [threading.Thread(target=create_and_remove, args=(n,)) for n in range(LOOPS)]
        for t in loops:
            t.start()
        for t in loops:
            t.join(timeout=900)
        assert not any(t.is_alive() for t in loops), "a create loop hung"
    finally:
        stop.set()
        gc_thread.join(timeout=120)
        for loop in range(LOOPS):
            cli("rm", "-f", *(f"{tag}-{loop}-{i}" for i in range(ROUNDS)))
    assert passes, "gc never ran"
    assert failed == [], failed
    assert broken == [], (broken, removed)


@attrs.frozen
class _Other:
    cli: Cli
    client: Client
    logs: Path


@pytest.fixture
def other(test_image_archive: Path, tmp_path: Path) -> Iterator[_Other]:
    """A second containerd on the host, with the session's namespace name."""
    with private_containerd() as daemon:
        import_image(daemon.address, TEST_NAMESPACE, test_image_archive)
        logs = tmp_path / "logs"
        with Client.connect(daemon.address, namespace=TEST_NAMESPACE) as c:
            yield _Other(cli=Cli(daemon.address, log_dir=logs), client=c, logs=logs)


def _age(path: Path) -> None:
    """An hour older: the directory and what is in it (gc's age is the newest)."""
    for p in [path, *(path.iterdir() if path.is_dir() else ())]:
        then = p.stat().st_mtime - 3600
        os.utime(p, (then, then), follow_symlinks=False)


def _objects(o: _Other, name: str) -> dict[str, bool]:
    """Whether each host object of the other daemon's container is still there."""
    cgroup = task_cgroup(TEST_NAMESPACE, name).lstrip("/")
    trees = [Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").iterdir()]
    return {
        "pin": netns.is_mounted(_pin(name)),
        "log dir": (o.logs / TEST_NAMESPACE / name).is_dir(),
        "host files": hostfiles.task_dir(
            hostfiles.DEFAULT_DIR, TEST_NAMESPACE, name
        ).directory.is_dir(),
        "cgroup": any((t / cgroup).is_dir() for t in trees),
    }


def test_gc_leaves_a_second_containerd_with_the_same_namespace_name_alone(
    cli: Cli, client: Client, test_image: str, bridge: str, other: _Other, tmp_path: Path
) -> None:
    tag = f"gco{secrets.token_hex(2)}"
    running, stopped = f"{tag}-run", f"{tag}-stop"
    try:
        out = other.cli("run", "-d", "-p", "8080", "--name", running, test_image, "sleep", "600")
        assert out.returncode == 0, out.stderr
        out = other.cli("run", "-d", "-p", "8080", "--name", stopped, test_image, "true")
        assert out.returncode == 0, out.stderr
        until(lambda: _in_its_pin(other.client, running), "the other's container running")

        until(lambda: exited(other.client, stopped), "the other's second container stopped")
        for name in (running, stopped):  # past the default grace, as a day-old task's
            _age(other.logs / TEST_NAMESPACE / name)
            _age(hostfiles.task_dir(hostfiles.DEFAULT_DIR, TEST_NAMESPACE, name).directory)
            _age(Path(nsmarks.MARK_DIR, f"cx-{name}"))
        before = {n: _objects(other, n) for n in (running, stopped)}
        assert all(all(v.values()) for v in before.values()), before

        # against the session's containerd: the default grace, then none
        for grace in (300.0, 0.0):
            scope = Scope(client, networks=settings.from_env(), log_dir=other.logs, grace=grace)
            report = checks.gc(scope, checks=_narrowed(tag))
            assert report.removed == [], (grace, report.removed)
            assert {n: _objects(other, n) for n in (running, stopped)} == before
        assert _in_its_pin(other.client, running)
        doctor = cli("doctor", "--json", "--grace", "0", "--log-dir", str(other.logs))
        assert tag not in doctor.stdout, doctor.stdout  # not even listed: not ours to judge
    finally:
        with contextlib.suppress(Exception):
            other.cli("rm", "-f", running, stopped)


def _attachment(name: str) -> dict[str, bool]:
    """Whether each part of the bridge attachment of the one-task group ``name`` is
    there: its cached CNI result, its owner record, its host-local reservation."""
    nets = settings.from_env()
    held = [
        path
        for path in Path(nets.ipam_dir, nets.network).glob("10.*")
        if ipamstore.parse_reservation(path.read_bytes().decode())[0] == name
    ]
    return {
        "result": nets.cni.cache_path(nets.network, name, "eth0").exists(),
        "owner record": nets.cni.owner_path(nets.network, name, "eth0").exists(),
        "reservation": bool(held),
    }


def _unpin(name: str) -> None:
    """The pin unmounted behind ctrexec's back (``ip netns del``)."""
    subprocess.run(["ip", "netns", "del", f"cx-{name}"], check=True, capture_output=True)
    assert not netns.is_mounted(_pin(name))


def test_gc_spares_a_second_containerds_cni_result_and_reservation(
    cli: Cli, client: Client, test_image: str, bridge: str, other: _Other
) -> None:
    tag = f"gcn{secrets.token_hex(2)}"
    name = f"{tag}-run"
    try:
        out = other.cli("run", "-d", "-p", "8080", "--name", name, test_image, "sleep", "600")
        assert out.returncode == 0, out.stderr
        until(lambda: _in_its_pin(other.client, name), "the other's container running")
        state = tasks.find(other.client, name)
        assert state is not None and state.pid
        nets = settings.from_env()
        owner = nets.cni.owner(nets.network, name, "eth0")
        assert owner == owners.Owner(other.client.address, TEST_NAMESPACE, name)
        _unpin(name)  # nothing but the owner record now says whose the attachment is
        assert all(_attachment(name).values()), _attachment(name)

        scope = Scope(client, networks=settings.from_env(), log_dir=other.logs, grace=0.0)
        report = checks.gc(scope, checks=_narrowed(tag))
        assert report.removed == [] and report.failed == [], report
        assert all(_attachment(name).values()), _attachment(name)
        assert Path(f"/proc/{state.pid}/ns/net").exists(), "the other's task is gone"
        doctor = cli("doctor", "--json", "--grace", "0", "--log-dir", str(other.logs))
        rows = [r for r in json.loads(doctor.stdout or "[]") if r["Kind"] in (CNI_RESULT, IPAM)]
        assert [r for r in rows if tag in f"{r['Where']} {r['What']}"] == [], rows
    finally:
        with contextlib.suppress(Exception):
            other.cli("rm", "-f", name)


def test_gc_spares_and_names_a_reservation_another_tool_made(
    cli: Cli, client: Client, bridge: str
) -> None:
    nets = settings.from_env()
    pool = Path(nets.ipam_dir, nets.network)
    pool.mkdir(parents=True, exist_ok=True)
    holder = f"othertool-{secrets.token_hex(3)}"  # an id ctrexec never made
    path = pool / "10.231.219.250"
    path.write_text(ipamstore.reservation_text(holder, "eth0"))
    _age(path)
    try:
        report = checks.gc(Scope(client, networks=nets, grace=0.0), checks=_narrowed(holder))
        assert report.removed == [] and report.failed == [], report
        assert path.exists(), "gc removed another tool's reservation"
        named = [f for f in report.spared if f.where == str(path)]
        assert [f.kind for f in named] == [IPAM], report.spared
        assert owners.UNRECORDED in named[0].what and holder in named[0].what, named
        found = cli("doctor", "--json", "--grace", "0")
        rows = [r for r in json.loads(found.stdout or "[]") if r["Where"] == str(path)]
        assert len(rows) == 1 and rows[0]["Garbage"] is False, rows
        assert owners.UNRECORDED in str(rows[0]["What"]), rows
        dry = cli("gc", "--dry-run", "--json", "--grace", "0")
        listed = json.loads(dry.stdout)
        assert str(path) not in {r["Where"] for r in listed["Removed"]}, listed
        assert str(path) in {r["Where"] for r in listed["Spared"]}, listed
    finally:
        path.unlink(missing_ok=True)


def test_gc_still_removes_ctrexecs_own_attachment_left_behind(
    cli: Cli, client: Client, test_image: str, bridge: str, tmp_path: Path
) -> None:
    tag = f"gcs{secrets.token_hex(2)}"
    name = f"{tag}-own"
    try:
        out = cli("run", "-d", "-p", "8080", "--name", name, test_image, "sleep", "600")
        assert out.returncode == 0, out.stderr
        until(lambda: _in_its_pin(client, name), "the container running in its pin")
        nets = settings.from_env()
        assert nets.cni.owner(nets.network, name, "eth0") == owners.Owner(
            client.address, client.namespace, name
        )
        # its task and record deleted, its pin unmounted, all behind ctrexec's back
        tasks.force_delete(client, name)
        containers.delete(client, name)
        _unpin(name)
        assert all(_attachment(name).values()), _attachment(name)

        scope = Scope(client, networks=settings.from_env(), log_dir=tmp_path / "logs", grace=0)
        report = checks.gc(scope, checks=_narrowed(tag))
        assert report.failed == [], report.failed
        assert CNI_RESULT in {f.kind for f in report.removed}, report.removed
        assert not any(_attachment(name).values()), _attachment(name)
    finally:
        with contextlib.suppress(Exception):
            cli("rm", "-f", name)
        # the namespace's cgroup, which ctrexec's own destroy would have removed with
        # the last task: runc removed the leaf, and nothing else is left to
        cgroup = Path(task_cgroup(client.namespace, name).lstrip("/")).parent
        for tree in [Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").iterdir()]:
            for path in (tree / cgroup, tree / cgroup.parent):
                with contextlib.suppress(OSError):
                    path.rmdir()  # only when empty: another namespace's tasks stay
