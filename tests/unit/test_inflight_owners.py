"""The in-flight lock gc respects, the owner records it judges by, and the Nomad sweep's
uid rule (issue 36, item 4)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from ctrexec import inflight, owners
from ctrexec.defaults import NOMAD_SOCKET_DIR_PREFIX, NOMAD_SOCKET_NAME
from ctrexec.doctor import nomadsockets
from ctrexec.doctor.nomadsockets import sweep_nomad_sockets
from ctrexec.net import nsmarks


@pytest.fixture(autouse=True)
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflight, "LOCK_DIR", tmp_path / "inflight")
    monkeypatch.setattr(nsmarks, "MARK_DIR", tmp_path / "marks")


def test_a_create_in_flight_keeps_gc_off_and_gc_unlinks_the_lock_it_held() -> None:
    key = inflight.netns_key("cx-web")
    with inflight.creating(key):
        assert inflight.busy(key)
        with inflight.claimed(key) as free:
            assert not free
        with inflight.creating(key):  # creates share it
            pass
    assert not inflight.busy(key)
    with inflight.claimed(key) as free:
        assert free
    assert not (inflight.LOCK_DIR / f"{key}.lock").exists()
    with inflight.creating(key):  # a new file once gc unlinked the old one
        assert inflight.busy(key)


def test_a_create_that_opened_the_file_gc_unlinked_locks_the_new_one() -> None:
    key = inflight.netns_key("cx-db")
    path = inflight.LOCK_DIR / f"{key}.lock"
    with inflight.claimed(key) as free:
        assert free
        stale = os.open(path, os.O_RDWR)  # what a create opened before the unlink
    try:
        with inflight.creating(key):
            assert path.exists() and os.fstat(stale).st_ino != path.stat().st_ino
            assert inflight.busy(key)
    finally:
        os.close(stale)


def test_bad_keys_are_refused() -> None:
    for key in ("", "a/b", ".hidden"):
        with pytest.raises(ValueError):
            inflight.busy(key)


def test_an_owner_round_trips_and_says_why_gc_spares_an_object() -> None:
    owner = owners.Owner("/run/containerd/containerd.sock", "ctrexec", "web")
    assert owners.Owner.parse(owner.to_text()) == owner
    assert owners.Owner.parse("1:2:3\n") is None
    assert owners.spared(owner, owner.address, "ctrexec") is None
    assert owners.spared(None, owner.address, "ctrexec") == owners.UNRECORDED
    other = owners.spared(owner, "/var/lib/ctrexec/containerd.sock", "ctrexec")
    assert other is not None and owner.address in other


def test_an_owner_record_goes_with_a_create_that_failed_unless_it_was_there(
    tmp_path: Path,
) -> None:
    owner = owners.Owner("/a.sock", "ns", "web")
    path = owners.task_record(tmp_path, "ns", "web")
    with pytest.raises(RuntimeError), owners.recording(tmp_path, owner):
        assert owners.read(path) == owner
        raise RuntimeError("create failed")
    assert owners.read(path) is None
    with owners.recording(tmp_path, owner):
        pass
    with pytest.raises(RuntimeError), owners.recording(tmp_path, owner):
        raise RuntimeError("AlreadyExists: the name's container keeps its owner")
    assert owners.read(path) == owner


def test_a_pin_marker_names_its_owner_only_for_the_namespace_it_marked(tmp_path: Path) -> None:
    pin = tmp_path / "cx-web"
    pin.touch()
    owner = owners.Owner("/a.sock", "ns", "web")
    nsmarks.mark(str(pin), owner)
    assert nsmarks.made_by_ctrexec(str(pin)) and nsmarks.owner_of(str(pin)) == owner
    nsmarks.mark(str(pin))
    assert nsmarks.made_by_ctrexec(str(pin)) and nsmarks.owner_of(str(pin)) is None
    nsmarks.mark(str(pin), owner)
    pin.unlink()
    pin.touch()  # another namespace under the name: not the marked one
    assert nsmarks.owner_of(str(pin)) is None and nsmarks.recorded_owner(str(pin)) == owner


def test_the_nomad_sweep_leaves_other_users_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}dead"
    dead.mkdir()
    (dead / NOMAD_SOCKET_NAME).touch()
    then = time.time() - 3600
    os.utime(dead, (then, then))
    uid = os.geteuid()
    monkeypatch.setattr(nomadsockets.os, "geteuid", lambda: uid + 1)  # another user's, then
    assert sweep_nomad_sockets(tmp_path) == [] and dead.is_dir()
    monkeypatch.setattr(nomadsockets.os, "geteuid", lambda: uid)
    assert sweep_nomad_sockets(tmp_path) == [dead] and not dead.exists()


def test_the_owners_of_a_namespace_are_every_daemons(tmp_path: Path) -> None:
    mine, theirs = owners.Owner("/a.sock", "ns", "web"), owners.Owner("/b.sock", "ns", "db")
    for owner in (mine, theirs, owners.Owner("/a.sock", "ns2", "web")):
        owners.write(owners.task_record(tmp_path, owner.namespace, owner.of), owner)
    assert sorted(owners.task_owners(tmp_path, "ns"), key=str) == sorted([mine, theirs], key=str)
    assert owners.task_owners(tmp_path / "none", "ns") == []


def test_the_plugin_start_and_gc_spare_a_live_plugin_and_a_directory_not_a_plugins(
    tmp_path: Path,
) -> None:
    """One rule for both (it was two: the plugin's own sweep removed a directory holding
    more than the socket as long as the rmdir happened to fail)."""
    then = time.time() - 3600
    live, other, dead = (tmp_path / f"{NOMAD_SOCKET_DIR_PREFIX}{n}" for n in ("a", "b", "c"))
    for directory in (live, other, dead):
        directory.mkdir()
    (other / NOMAD_SOCKET_NAME).touch()
    (other / "notes").write_text("someone's")
    (dead / NOMAD_SOCKET_NAME).touch()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(live / NOMAD_SOCKET_NAME))
        server.listen()
        for directory in (live, other, dead):
            os.utime(directory, (then, then))
        assert sweep_nomad_sockets(tmp_path) == [dead]
    assert live.is_dir() and (other / "notes").is_file() and not dead.exists()
