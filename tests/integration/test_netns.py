"""Named network namespaces on the real kernel: create, inspect, verify, remove.

Every namespace is named ``cxt-<test tag>-...`` and removed in a finalizer, and the
module ends with an audit that nothing named after these tests is left behind.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE

from ctrexec import _linux
from ctrexec.cli.main import main as cli_main
from ctrexec.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
    PermissionDenied,
)
from ctrexec.net import netns, nsinfo, nsmarks
from ctrexec.testing import NETNS_RELEASE_TIMEOUT, namespace_id, netns_references, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

RUN_TAG = f"cxt-ns{os.getpid()}-{uuid.uuid4().hex[:4]}"


def _discard(path: str) -> None:
    """Last-resort cleanup that works even if the code under test is broken."""
    for _ in range(4):
        if subprocess.run(["umount", "-l", path], check=False, capture_output=True).returncode != 0:
            break
    Path(path).unlink(missing_ok=True)


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Hands out unique names, and removes whatever exists under them afterwards."""
    made: list[str] = []
    short = request.node.name.replace("test_", "")[:14].replace("_", "-").strip("-")

    def make(suffix: str = "") -> str:
        name = f"{RUN_TAG}-{short}{len(made)}{suffix}"
        made.append(name)
        return name

    yield make
    for name in made:
        _discard(f"/run/netns/{name}")
        nsmarks.unmark(f"/run/netns/{name}")  # what a create that worked marked


def threads_in_host_netns() -> bool:
    host = Path("/proc/self/ns/net").stat()
    for task in Path("/proc/self/task").iterdir():
        try:
            st = (task / "ns" / "net").stat()
        except FileNotFoundError:
            continue  # thread exited meanwhile
        if (st.st_dev, st.st_ino) != (host.st_dev, host.st_ino):
            return False
    return True


def test_create_inspect_remove(names: Callable[..., str]) -> None:
    name = names("")
    ns = netns.create(name)
    assert ns == netns.NetNS(name=name, path=f"/run/netns/{name}")
    assert netns.is_mounted(ns.path)
    netns.verify(ns.path)
    assert ns in netns.list_namespaces()
    assert Path(ns.path).stat().st_ino != Path("/proc/self/ns/net").stat().st_ino
    propagation = subprocess.run(
        ["findmnt", "-n", "-o", "PROPAGATION", "/run/netns"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert propagation[0] == "shared"  # like `ip netns add` leaves it
    assert (
        name
        in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout
    )  # iproute2 sees ctrexec's namespaces and vice versa

    info = nsinfo.inspect(ns.path)
    assert [i.name for i in info.interfaces] == ["lo"]
    lo = info.interface("lo")
    assert lo is not None
    assert lo.up
    assert lo.mtu == 65536
    assert "127.0.0.1/8" in [a.cidr for a in info.addresses_of("lo")]
    assert info.routes == ()
    assert info.inode == Path(ns.path).stat().st_ino
    assert threads_in_host_netns()

    netns.remove(name)
    assert not os.path.lexists(ns.path)
    assert not netns.is_mounted(ns.path)
    assert ns not in netns.list_namespaces()
    with pytest.raises(NotFound):
        netns.verify(ns.path)
    with pytest.raises(NotFound):
        netns.remove(name)
    assert threads_in_host_netns()


def test_already_exists_and_exist_ok(names: Callable[..., str]) -> None:
    name = names()
    first = netns.create(name)
    inode = Path(first.path).stat().st_ino
    with pytest.raises(AlreadyExists):
        netns.create(name)
    again = netns.create(name, exist_ok=True)
    assert again == first
    assert Path(first.path).stat().st_ino == inode  # the same namespace, not a new one
    netns.remove(first.path)  # by path works too


def test_a_killed_creates_empty_file_is_finished_other_files_refused(
    names: Callable[..., str],
) -> None:
    """A create killed between the file and its bind mount leaves an empty, unmounted
    file: the rerun (``group up``, exist_ok) pins a namespace on it. A file with
    anything in it is still never reused."""
    name, other = names(), names()
    netns.create(names())  # make sure /run/netns exists
    path = Path(f"/run/netns/{name}")
    path.touch()  # what a crash between create-file and bind-mount leaves
    with pytest.raises(AlreadyExists):
        netns.create(name)
    made = netns.create(name, exist_ok=True)
    netns.verify(made.path)  # a live network namespace now
    netns.remove(name)
    assert not path.exists()
    kept = Path(f"/run/netns/{other}")
    kept.write_text("data")
    try:
        with pytest.raises(FailedPrecondition):
            netns.create(other, exist_ok=True)
        assert kept.read_text() == "data"
    finally:
        kept.unlink()


def test_remove_refuses_what_is_not_a_namespace(names: Callable[..., str], tmp_path: Path) -> None:
    netns.create(names())
    data = Path(f"/run/netns/{names()}")
    data.write_text("not a namespace")
    with pytest.raises(InvalidArgument):
        netns.remove(str(data))
    assert data.read_text() == "not a namespace"
    with pytest.raises(InvalidArgument):
        netns.remove(str(tmp_path))
    with pytest.raises(InvalidArgument):
        netns.remove("/proc/self/ns/net")
    with pytest.raises(InvalidArgument):
        netns.remove("bad/relative")


def test_host_namespace_is_refused(names: Callable[..., str]) -> None:
    try:
        netns.verify("/proc/1/ns/net")
    except (InvalidArgument, PermissionDenied):
        pass  # unreadable where pid 1 is shielded; refused either way
    else:
        pytest.fail("the host namespace was accepted")
    netns.create(names())
    host_pin = f"/run/netns/{names()}"
    Path(host_pin).touch()
    _linux.mount("/proc/self/ns/net", host_pin, None, _linux.MS_BIND)
    with pytest.raises(InvalidArgument, match="host"):
        netns.verify(host_pin)
    with pytest.raises(InvalidArgument, match="host"):
        nsinfo.inspect(host_pin)
    netns.verify(host_pin, allow_host=True)
    netns.remove(host_pin)
    assert not os.path.lexists(host_pin)


def test_failed_create_leaves_nothing(
    names: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    netns.create(names())

    def broken_link_up(ifname: str) -> None:
        raise OSError(5, "injected failure after the bind mount")

    monkeypatch.setattr(_linux, "set_link_up", broken_link_up)
    name = names()
    with pytest.raises(NetworkError, match="injected"):
        netns.create(name)
    assert not os.path.lexists(f"/run/netns/{name}")
    assert not netns.is_mounted(f"/run/netns/{name}")

    def broken_unshare(flags: int) -> None:
        raise PermissionError(1, "injected unshare failure")

    monkeypatch.setattr(_linux, "unshare", broken_unshare)
    name = names()
    with pytest.raises(PermissionDenied):
        netns.create(name)
    assert not os.path.lexists(f"/run/netns/{name}")
    assert threads_in_host_netns()


def test_netlink_acts_inside_the_namespace(names: Callable[..., str]) -> None:
    ns = netns.create(names())
    with netns.netlink(ns.path) as ipr:
        ipr.link("add", ifname="cxtv0", kind="veth", peer="cxtv1")
    info = nsinfo.inspect(ns.path)
    assert {"cxtv0", "cxtv1"} <= {i.name for i in info.interfaces}
    veth = info.interface("cxtv0")
    assert veth is not None
    assert veth.kind == "veth"
    assert veth.mac
    assert not veth.up
    host = subprocess.run(["ip", "link", "show", "cxtv0"], check=False, capture_output=True)
    assert host.returncode != 0  # nothing leaked into the host namespace
    with pytest.raises(AlreadyExists), netns.netlink(ns.path) as ipr:
        ipr.link("add", ifname="cxtv0", kind="veth", peer="cxtv1")
    with pytest.raises(NotFound), netns.netlink(ns.path) as ipr:
        ipr.link("set", index=424242, state="up")
    assert threads_in_host_netns()


def test_netlink_socket_cannot_be_used_from_another_thread(names: Callable[..., str]) -> None:
    ns = netns.create(names())
    errors: list[BaseException] = []
    with netns.netlink(ns.path) as ipr:

        def other() -> None:
            try:
                list(ipr.link("dump"))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert errors  # loud failure, never a silent fallback to the host namespace


def test_mounts_propagate_into_existing_mount_namespaces(names: Callable[..., str]) -> None:
    netns.create(names())  # /run/netns is now a shared mount point
    name = names()
    path = f"/run/netns/{name}"
    script = f"read x; findmnt -n -o TARGET {path}; read x; findmnt -n {path} || echo gone"
    # A task's mount namespace is a recursive slave of the host's (runc's default).
    child = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "slave", "sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        netns.create(name)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == path  # created later, still visible
        netns.remove(name)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "gone"  # and the unmount reached it
    finally:
        child.kill()
        child.communicate()


def test_ensure_loopback_up(names: Callable[..., str]) -> None:
    name = names()
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    path = f"/run/netns/{name}"
    lo = nsinfo.inspect(path).interface("lo")
    assert lo is not None
    assert not lo.up  # how iproute2 leaves it
    netns.ensure_loopback_up(path)
    netns.ensure_loopback_up(path)  # idempotent
    info = nsinfo.inspect(path)
    assert [(i.name, i.up) for i in info.interfaces] == [("lo", True)]
    assert "127.0.0.1/8" in [a.cidr for a in info.addresses_of("lo")]
    assert threads_in_host_netns()
    with pytest.raises((InvalidArgument, PermissionDenied)):
        netns.ensure_loopback_up("/proc/1/ns/net")  # never the host's
    with pytest.raises(NotFound):
        netns.ensure_loopback_up(f"/run/netns/{names()}")
    netns.remove(path)


def _link_exists(name: str) -> bool:
    shown = subprocess.run(["ip", "link", "show", name], check=False, capture_output=True)
    return shown.returncode == 0


@pytest.mark.parametrize("how", ["library", "cli"])
def test_removed_namespace_is_not_kept_alive_by_ctrexec(
    names: Callable[..., str],
    containerd_address: str,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    """Once ``netns rm`` returns, nothing of this process refers to the namespace.

    The host end of a veth whose other end is inside goes only when the kernel frees
    the namespace, asynchronously; this proves that the delay is the kernel's, not a
    reference ctrexec still holds (an nsfs fd, a socket opened inside, a thread).
    """
    name = names()
    ns = netns.create(name)
    host_end = f"cxtr{uuid.uuid4().hex[:8]}"
    add = ["ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", name]
    subprocess.run(add, check=True, capture_output=True)
    try:
        ident = namespace_id(ns.path)
        # Everything that enters the namespace runs first, so a leak would show.
        with netns.netlink(ns.path) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], state="up")
        assert nsinfo.inspect(ns.path).interface("eth0") is not None
        # The check sees what it must: an nsfs fd, and a socket opened inside.
        fd = os.open(ns.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            sock = _linux.run_in_fresh_thread(lambda: _linux.in_netns(fd, socket.socket))
            with sock:
                refs = netns_references(ident)
                assert f"fd {fd} ({ns.path})" in refs
                assert any(f"fd {sock.fileno()} (socket:" in r for r in refs)
        finally:
            os.close(fd)
        assert netns_references(ident) == []
        if how == "cli":
            conn = ["--address", containerd_address, "--namespace", TEST_NAMESPACE]
            assert cli_main(["netns", "inspect", *conn, name]) == 0
            assert cli_main(["netns", "rm", *conn, name]) == 0
            assert name in capsys.readouterr().out
        else:
            netns.remove(name)
        assert not os.path.lexists(ns.path)
        assert netns_references(ident) == []
        wait_for(
            lambda: not _link_exists(host_end),
            timeout=NETNS_RELEASE_TIMEOUT,
            what="the kernel to free the namespace (and the veth's host end with it)",
        )
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            if _link_exists(host_end):
                subprocess.run(["ip", "link", "del", host_end], check=True)


def test_zz_audit_nothing_left() -> None:
    leftovers = [p.name for p in Path("/run/netns").glob(f"{RUN_TAG}*")]
    assert leftovers == []
    with Path("/proc/self/mountinfo").open() as f:
        assert not [line for line in f if RUN_TAG in line]
    links = subprocess.run(["ip", "-o", "link"], check=False, capture_output=True, text=True).stdout
    assert "cxtv0" not in links
    assert threads_in_host_netns()
