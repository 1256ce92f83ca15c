"""Issue 20, scenarios 1 and 6: the group's namespace pin is lost, and a reboot.

A lost pin (``umount; rm`` of ``/run/netns/cx-NAME``) is repaired from a running
member: its namespace is bound back at the pin, so the group keeps its namespace (the
same inode) and its address, whether ``group up``, ``start`` or the supervisor finds
it. After a "reboot" (every task gone, the pin, IPAM and CNI cache emptied; the
supervisor's ``boot_time`` stands in for the boot) the supervisor alone makes the
namespace again, wires it with the same port and starts the policy's member; the
member without a policy is reported exited, with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

from _chaoslib import wait_for
from _integrity import Bridged, _get, hold_stale_entries, host_neighbour

from ctrexec.containerd import tasks
from ctrexec.containerd.tasks import Status
from ctrexec.groups.supervisor import Supervisor
from ctrexec.tasks.executor import Executor


def lose_pin(g: Bridged) -> None:
    """What a tmpfiles rule or another tool does: the mount and the file go."""
    subprocess.run(["umount", g.pin], check=True, capture_output=True)
    os.unlink(g.pin)


@contextlib.contextmanager
def supervising(g: Bridged, **options: object) -> Iterator[Supervisor]:
    """A supervisor for the test's namespace in a thread, as ``ctrexec supervise`` runs."""
    sup = Supervisor(Executor(g.client), reconnect_delay=0.2, **options)  # type: ignore[arg-type]
    stop = threading.Event()
    thread = threading.Thread(target=sup.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield sup
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the supervisor did not stop"


def _status(g: Bridged, task: str) -> str:
    done = g.run("ps", "-a", "--filter", f"name={g.member(task)}", "--format", "{{.Status}}")
    return done.stdout.strip()


def _inspect(g: Bridged, task: str) -> dict[str, object]:
    done = g.run("inspect", g.member(task))
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)[0]
    return doc


def _before(g: Bridged) -> tuple[str, tuple[int, int]]:
    g.up()
    g.wait_sound()
    address = g.group_address()
    assert address is not None
    return address, g.namespaces()["pin"]


def _same_group(g: Bridged, address: str, namespace: tuple[int, int]) -> None:
    g.wait_sound()
    assert g.group_address() == address
    assert set(g.namespaces().values()) == {namespace}


def test_group_up_pins_the_running_members_namespace_again(bridged: Bridged) -> None:
    g = bridged
    address, namespace = _before(g)
    lose_pin(g)
    wait_for(lambda: "(namespace pin lost)" in _status(g, "srv"), "ps to say the pin is lost")
    ps = g.run("ps")
    assert "ctrexec start" in ps.stderr  # the command that repairs it
    doc = _inspect(g, "cli")
    assert "namespace pin lost" in str(doc["State"]["Error"])  # type: ignore[index]
    assert doc["NetworkSettings"]["IPAddress"] == address  # type: ignore[index]
    g.up()
    _same_group(g, address, namespace)
    assert "pin lost" not in _status(g, "srv")
    g.down_clean()


def test_the_supervisor_restarts_the_server_into_the_same_namespace(bridged: Bridged) -> None:
    g = bridged
    address, namespace = _before(g)
    with supervising(g):
        lose_pin(g)
        os.kill(g.member_pids()["srv"], signal.SIGKILL)
        _same_group(g, address, namespace)
    g.down_clean()


def test_start_of_a_stopped_member_pins_the_namespace_again(bridged: Bridged) -> None:
    g = bridged
    address, namespace = _before(g)
    stop = g.run("stop", g.member("cli"))
    assert stop.returncode == 0, stop.stderr
    lose_pin(g)
    start = g.run("start", g.member("cli"))
    assert start.returncode == 0, start.stderr
    _same_group(g, address, namespace)
    g.down_clean()


def test_start_of_a_running_member_pins_the_namespace_again(bridged: Bridged) -> None:
    """The repair ps names: a no-op start, as docker's, pins the namespace again."""
    g = bridged
    address, namespace = _before(g)
    lose_pin(g)
    start = g.run("start", g.member("srv"))
    assert start.returncode == 0, start.stderr
    _same_group(g, address, namespace)
    g.down_clean()


def _wipe(directory: str | os.PathLike[str]) -> None:
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def test_after_a_reboot_the_supervisor_alone_restores_the_group(bridged: Bridged) -> None:
    g = bridged
    address, _ = _before(g)
    for task in ("srv", "cli"):  # what the reboot does: every task is gone, no exit seen
        tasks.force_delete(g.client, g.member(task))
    lose_pin(g)
    _wipe(g.ipam)
    _wipe(g.cache)
    time.sleep(0.01)  # the "boot" comes strictly after every run's start
    booted = time.time()
    with supervising(g, boot_time=lambda: booted):
        wait_for(lambda: "host restarted" in _status(g, "cli"), "cli to be reported exited")
        wait_for(lambda: "srv" in g.member_pids(), "the supervisor to start srv again")
    assert _status(g, "cli").startswith("Exited (255)")
    assert _inspect(g, "cli")["State"]["Error"] == "host restarted"  # type: ignore[index]
    pids = g.member_pids()
    assert set(pids) == {"srv"}
    start = g.run("start", g.member("cli"))  # the operator starts what no policy brought back
    assert start.returncode == 0, start.stderr
    g.wait_sound()
    assert g.group_address() == address  # the address was free: it is the group's again
    assert tasks.find(g.client, g.member("cli")).status is Status.RUNNING  # type: ignore[union-attr]
    g.down_clean()


def test_after_a_reboot_the_host_reaches_the_remade_namespace_at_its_new_mac(
    bridged: Bridged,
) -> None:
    """Issue 36, item 5: the supervisor's re-make after a reboot gives the group a new
    veth (a new MAC) at its old address; the host's neighbour entry must follow it (the
    attach announces the address) and the published port answer, bounded waits. A
    second group keeps the bridge up, as on a host with more than one group."""
    g = bridged
    g.up()
    _, second = g.extra("b")
    g.up(second)
    g.wait_sound()
    hold_stale_entries(g)
    address = g.group_address()
    _, old_mac = g.eth0(g.member_pids()["srv"])
    assert address is not None and old_mac is not None
    wait_for(lambda: _get(g.host_port) == "ok" and host_neighbour(g, address) == old_mac,
             "the host to reach the group at its MAC", timeout=30, interval=0.5)  # fmt: skip
    for task in ("srv", "cli"):
        tasks.force_delete(g.client, g.member(task))
    lose_pin(g)
    _wipe(g.ipam)
    _wipe(g.cache)
    time.sleep(0.01)  # the "boot" comes strictly after every run's start
    booted = time.time()
    with supervising(g, boot_time=lambda: booted):
        wait_for(lambda: "srv" in g.member_pids(), "the supervisor to start srv again")
        _, new_mac = g.eth0(g.member_pids()["srv"])
        assert new_mac is not None and new_mac != old_mac
        seen: list[str | None] = []
        try:
            wait_for(lambda: seen.append(host_neighbour(g, address)) or seen[-1] == new_mac,
                     "the host's entry on the new MAC", timeout=60, interval=0.5)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the entry is on {seen[-1]}, eth0 has {new_mac}") from None
        wait_for(lambda: _get(g.host_port) == "ok", "the published port", timeout=60, interval=0.2)
    assert g.group_address() == address
    start = g.run("start", g.member("cli"))
    assert start.returncode == 0, start.stderr
    g.wait_sound()
    g.down_clean()


def test_another_namespace_at_the_pin_is_a_split_refused_by_name(bridged: Bridged) -> None:
    """Another tool puts a namespace of its own at the lost pin: the members are not
    in it. ``group up`` and ``start`` refuse, naming which member is in which; ``ps``
    says so. Once the stranger goes, ``group up`` pins the members' namespace again."""
    g = bridged
    address, namespace = _before(g)
    lose_pin(g)
    subprocess.run(["ip", "netns", "add", os.path.basename(g.pin)], check=True)
    try:
        up = g.run("group up", str(g.file))
        assert up.returncode == 125, up.stderr
        assert "different namespaces" in up.stderr and g.member("srv") in up.stderr
        assert "Traceback" not in up.stderr
        start = g.run("start", g.member("cli"))
        assert start.returncode == 1 and "different namespaces" in start.stderr  # as docker start
        wait_for(lambda: "(namespace split)" in _status(g, "cli"), "ps to say the split")
    finally:
        subprocess.run(["ip", "netns", "del", os.path.basename(g.pin)], check=False)
    g.up()
    _same_group(g, address, namespace)
    g.down_clean()
