"""Groups on a real bridge: shared netns, port mapping, restart with the same IP, leaks."""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from _nethelpers import free_port
from _support import audited_groups, supervising

from ctrexec import errors, testing
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.groups.spec import GroupSpec, load_group_file, parse_group
from ctrexec.groups.updown import Groups
from ctrexec.net import groupns, netns
from ctrexec.net.networks import Networks

SUBNET = "10.231.180.0/24"


@pytest.fixture
def groups(
    client: Client, tmp_path: Path, test_image: str, containerd_address: str
) -> Iterator[Groups]:
    with audited_groups(client, tmp_path, containerd_address, "cxtg", SUBNET) as g:
        yield g


def _spec(name: str, image: str, port: int | None = None, **extra: object) -> GroupSpec:
    data: dict[str, object] = {
        "name": name,
        "network": "bridge",
        "task": [
            {
                "name": "server",
                "image": image,
                "command": ["httpd", "-f", "-p", "8080", "-h", "/var/www"],
                "restart": {"policy": "always", "delay": 0.1},
            },
            {"name": "client", "image": image, "command": ["sleep", "1000"]},
        ],
        **extra,
    }
    if port:
        data["ports"] = [f"{port}:8080/tcp"]
    return parse_group(data)


def _until(pred: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():  # type: ignore[operator]
                return
        except (OSError, errors.CtrexecError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _ip(g: Groups, name: str) -> str:
    a = [a for a in g.networks.attachments() if a.owner == name]
    assert len(a) == 1
    return a[0].addresses()[0]


def test_group_up_localhost_port_and_restart_same_ip(groups: Groups, test_image: str) -> None:
    port = free_port()
    name = f"cxt{secrets.token_hex(2)}"
    infos = groups.up(_spec(name, test_image, port))
    assert {i.status for i in infos} == {Status.RUNNING}
    ex = groups.executor
    cid = f"{name}-client"

    def local() -> bool:
        # No -T: Debian's busybox-static 1.35 wget segfaults with a timeout option.
        r = ex.exec(cid, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/"])
        return r.exit_code == 0 and b"hello from ctrexec" in r.stdout

    _until(local, "task-to-task over localhost")
    _until(
        lambda: b"hello" in urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read(),
        "host to mapped port on 127.0.0.1",
    )
    ip = _ip(groups, name)
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(SUBNET)
    # Each member's /etc/hosts names it, and every member, on the group's address.
    hosts = ex.exec(cid, ["cat", "/etc/hosts"]).stdout.decode()
    assert f"{ip}\t{name}\n{ip}\t{name}-server server\n{ip}\t{name}-client client\n" in hosts
    _until(
        lambda: ex.exec(cid, ["wget", "-q", "-O", "-", "http://server:8080/"]).exit_code == 0,
        "task-to-task by the member's name",
    )

    with supervising(ex):
        old_pid = ex.inspect(f"{name}-server").pid
        os.kill(old_pid, 9)
        _until(
            lambda: (
                ex.inspect(f"{name}-server").status is Status.RUNNING
                and ex.inspect(f"{name}-server").pid != old_pid
            ),
            "restart by policy",
        )
        _until(local, "served again after restart")
        assert _ip(groups, name) == ip
        assert ex.inspect(cid).status is Status.RUNNING
    groups.down(name, timeout=2)
    assert not Path(f"/run/netns/cx-{name}").exists()
    assert groups.ps(name) == []


def test_up_after_crash_reuses_namespace_and_ip(groups: Groups, test_image: str) -> None:
    name = f"cxt{secrets.token_hex(2)}"
    spec = _spec(name, test_image)
    groups.up(spec)
    ip = _ip(groups, name)
    # Simulate a crash: tasks die, the namespace and CNI state survive, and a new
    # ctrexec process (new Networks object) runs `group up` again.
    for info in groups.ps(name):
        groups.executor.signal(info.id, "SIGKILL")
    for info in groups.ps(name):
        groups.executor.wait(info.id, timeout=30)
    fresh = Groups(
        groups.executor,
        groups.networks.__class__(
            network=groups.networks.network,
            bridge=groups.networks.bridge,
            subnet=SUBNET,
            cache_dir=groups.networks.cni.cache_dir,
            ipam_dir=Path(groups.networks.cni.cache_dir).parent / "ipam",
        ),
    )
    infos = fresh.up(spec)
    assert {i.status for i in infos} == {Status.RUNNING}
    assert _ip(fresh, name) == ip
    ipam = list((Path(groups.networks.cni.cache_dir).parent / "ipam").rglob("10.*"))
    assert len(ipam) == 1
    groups.down(name, timeout=1)


def test_down_releases_with_the_settings_the_group_was_wired_with(
    groups: Groups, test_image: str, tmp_path: Path
) -> None:
    """A ``group down`` whose caller has other network settings (another environment)
    still releases the attachment, address and namespace that ``up`` made."""
    name = f"cxt{secrets.token_hex(2)}"
    groups.up(_spec(name, test_image))
    _ip(groups, name)
    elsewhere = Networks(
        network="cxtgother",
        bridge="cxtgother",
        subnet="10.231.181.0/24",
        cache_dir=tmp_path / "other-cache",
        ipam_dir=tmp_path / "other-ipam",
    )
    Groups(groups.executor, elsewhere).down(name, timeout=1)
    assert [a.owner for a in groups.networks.attachments()] == []
    assert list((tmp_path / "ipam").rglob("10.*")) == []
    testing.wait_for(
        lambda: not Path(groupns.netns_path(name)).exists(), timeout=10, what="the pin to go"
    )
    assert not (tmp_path / "other-cache").exists() or not any((tmp_path / "other-cache").iterdir())


def test_an_edit_of_every_member_recreates_them_in_the_same_namespace(
    groups: Groups, test_image: str
) -> None:
    name = f"cxt{secrets.token_hex(2)}"
    groups.up(_spec(name, test_image))
    inode = os.stat(f"/run/netns/cx-{name}").st_ino
    said: list[str] = []
    infos = groups.up(_spec(name, test_image, hostname="different"), on_change=said.append)
    assert sorted(said) == [f"recreated {name}-client", f"recreated {name}-server"]
    assert {i.hostname for i in infos} == {"different"}
    assert os.stat(f"/run/netns/cx-{name}").st_ino == inode
    groups.down(name, timeout=1)


def test_port_already_mapped_by_another_group(groups: Groups, test_image: str) -> None:
    port = free_port()
    a, b = f"cxt{secrets.token_hex(2)}", f"cxt{secrets.token_hex(2)}"
    groups.up(_spec(a, test_image, port))
    with pytest.raises(errors.AlreadyExists, match=str(port)):
        groups.up(_spec(b, test_image, port))
    assert groups.ps(b) == []
    assert not Path(f"/run/netns/cx-{b}").exists()
    groups.down(a, timeout=1)


def test_missing_image_creates_nothing(groups: Groups) -> None:
    name = f"cxt{secrets.token_hex(2)}"
    spec = parse_group(
        {"name": name, "task": [{"name": "t", "image": "docker.io/library/nope-nope:v0"}]}
    )
    with pytest.raises(errors.NotFound):
        groups.up(spec)
    assert not Path(f"/run/netns/cx-{name}").exists()
    assert groups.ps(name) == []


def test_example_file_parses() -> None:
    spec = load_group_file(Path(__file__).resolve().parents[2] / "examples" / "web.toml")
    assert spec.name == "web"
    assert [t.name for t in spec.tasks] == ["server", "client"]


def test_prune_right_after_down_of_a_group_whose_namespace_went_first(
    groups: Groups, test_image: str
) -> None:
    """``network prune`` after ``group down``: when the namespace was removed out of
    band first (``ip netns del``), DEL cannot reach the veth, and its host end stays
    on the bridge until the kernel frees the namespace, asynchronously."""
    name = f"cxt{secrets.token_hex(2)}"
    groups.up(_spec(name, test_image))
    subprocess.run(["ip", "netns", "del", f"cx-{name}"], check=True)
    groups.down(name, timeout=0)
    assert groups.networks.remove_bridge() is True
    assert not Path(f"/sys/class/net/{groups.networks.bridge}").exists()


def test_fifty_up_down_cycles_leave_nothing(groups: Groups, test_image: str) -> None:
    name = f"cxt{secrets.token_hex(2)}"
    spec = parse_group(
        {"name": name, "task": [{"name": "t", "image": test_image, "command": ["sleep", "100"]}]}
    )
    for _ in range(50):
        groups.up(spec)
        groups.down(name, timeout=0)
    assert not netns.list_namespaces() or all(
        n.name != f"cx-{name}" for n in netns.list_namespaces()
    )
    assert groups.networks.attachments() == []
