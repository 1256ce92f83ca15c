"""Networks on real namespaces, bridges and plugins (Debian's containernetworking-plugins).

Names, subnets, cleanup and the leak audit that ends each test (namespaces, links,
iptables rules that name the tag, subnet or bridge, IPAM files, cached attachments,
after removing its bridges) come from the shared harness, ``_nethelpers``.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _nethelpers import (
    NET_MARKS,
    PLUGIN_DIR,
    NetEnv,
    fetch,
    free_port,
    free_subnet,
    iptables_dump,
    new_bridge_name,
    ping,
    run_env,
    sh,
    tag_of,
)

from ctrexec.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from ctrexec.net import cni, netns, nsinfo
from ctrexec.net.cni import PortMapping
from ctrexec.net.networks import Attachment, Networks
from ctrexec.testing import NETNS_RELEASE_TIMEOUT, wait_for

pytestmark = NET_MARKS


class Env(NetEnv):
    """One test's Networks, everything it made, and how to clean and audit it."""

    def __init__(self, tmp_path: Path, tag: str) -> None:
        super().__init__(tmp_path, tag)
        self.network = f"{self.tag}net"
        self.nets = self.networks()

    def networks(self) -> Networks:
        """A Networks over this test's dirs; a new one is what a restarted process makes."""
        return Networks(
            plugin_dirs=[PLUGIN_DIR],
            conf_dir=self.conf_dir,
            cache_dir=self.cache_dir,
            ipam_dir=self.ipam_dir,
            network=self.network,
            bridge=self.bridge,
            subnet=str(self.subnet),
        )

    @property
    def gateway(self) -> str:
        return str(next(self.subnet.hosts()))

    def owner(self, n: int = 0) -> str:
        return f"{self.tag}-g{n}"

    def bridge_ports(self, bridge: str | None = None) -> list[str]:
        out = sh("ip", "-o", "link", "show", "master", bridge or self.bridge).stdout
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]

    def attachments(self) -> list[Attachment]:
        return self.nets.attachments()

    def detach_all(self) -> None:
        for att in self.nets.attachments():
            try:
                self.nets.teardown(att.owner, None, att.mode)
            except Exception as exc:  # keep cleaning; the audit reports
                print(f"cleanup teardown failed: {exc}", file=sys.stderr)

    def remove_bridges(self) -> None:
        self.nets.remove_bridge()  # it waits, bounded, for ports of freed namespaces
        super().remove_bridges()

    def audit_links(self) -> None:
        links = sh("ip", "-o", "link").stdout
        for bridge in self.bridges:
            assert f" {bridge}:" not in links, f"bridge {bridge} left"
            assert f"master {bridge}" not in links, f"a link on {bridge} left"


@pytest.fixture
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    yield from run_env(Env(tmp_path, tag_of(request, 8)))


def wait_ports(env: Env, count: int, why: str) -> None:
    """Await ``count`` ports on the bridge: a removed namespace's veth goes only when
    the kernel frees that namespace, asynchronously."""
    wait_for(
        lambda: len(env.bridge_ports()) == count,
        timeout=NETNS_RELEASE_TIMEOUT,
        what=f"{count} port(s) on {env.bridge} ({why})",
    )


def count_adds(nets: Networks) -> list[str]:
    """Wrap the CNI runtime's add() so a test can see whether an ADD ran."""
    calls: list[str] = []
    real = nets.cni.add

    def add(*args: Any, **kw: Any) -> cni.CNIResult:
        calls.append(args[1])
        return real(*args, **kw)

    nets.cni.add = add  # type: ignore[method-assign]
    return calls


# ------------------------------------------------------------------------ tests


def test_bridge_setup_and_teardown(env: Env) -> None:
    ns = env.new_netns()
    att = env.nets.setup(env.owner(), ns.path, "bridge")
    [cidr] = att.ips
    assert ipaddress.ip_interface(cidr).network == env.subnet
    assert (att.mode, att.network, att.interface) == ("bridge", env.nets.network, "eth0")
    assert att.gateway == env.gateway
    assert att.netns_path == ns.path
    assert env.ipam_files() == att.addresses()

    info = nsinfo.inspect(ns.path)
    assert cidr in [a.cidr for a in info.addresses_of("eth0")]
    assert any(r.dst == "default" and r.gateway == env.gateway for r in info.routes)
    assert len(env.bridge_ports()) == 1
    assert env.nets.attachment(env.owner(), "bridge") == att
    assert env.nets.attachments() == [att]

    env.nets.teardown(env.owner(), ns.path, "bridge")
    assert nsinfo.inspect(ns.path).interface("eth0") is None
    assert env.bridge_ports() == []
    assert env.ipam_files() == []
    assert env.rules() == []
    assert env.nets.attachment(env.owner(), "bridge") is None
    env.nets.teardown(env.owner(), ns.path, "bridge")  # DEL twice: fine
    env.nets.teardown(env.owner(), None, "bridge")


def test_two_namespaces_reach_each_other(env: Env) -> None:
    a, b = env.new_netns(0), env.new_netns(1)
    ip_a = env.nets.setup(env.owner(0), a.path).addresses()[0]
    ip_b = env.nets.setup(env.owner(1), b.path).addresses()[0]
    assert ip_a != ip_b
    assert ping(a, ip_b).returncode == 0, ping(a, ip_b).stdout
    assert ping(b, ip_a).returncode == 0
    for n, ns in enumerate((a, b)):
        env.nets.teardown(env.owner(n), ns.path, "bridge")
    assert ping(a, ip_b).returncode != 0


def test_published_port_and_conflicts(env: Env) -> None:
    a, b = env.new_netns(0), env.new_netns(1)
    host_port = free_port()
    att = env.nets.setup(env.owner(0), a.path, "bridge", [PortMapping(host_port, 8080)])
    assert att.ports == (PortMapping(host_port, 8080),)
    env.serve_once(a, 8080, b"cxt-hello")
    assert fetch(host_port) == b"cxt-hello"

    adds = count_adds(env.nets)
    with pytest.raises(AlreadyExists, match=f"^port {host_port}/tcp is already mapped by group"):
        env.nets.setup(env.owner(1), b.path, "bridge", [PortMapping(host_port, 80)])
    local = PortMapping(host_port, 80, "tcp", "127.0.0.1")
    with pytest.raises(AlreadyExists, match="already mapped"):
        env.nets.setup(env.owner(1), b.path, "bridge", [local])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        busy_port = busy.getsockname()[1]
        with pytest.raises(AlreadyExists, match=f"^port {busy_port}/tcp is in use on the host$"):
            env.nets.setup(env.owner(1), b.path, "bridge", [PortMapping(busy_port, 80)])
    assert adds == []
    assert nsinfo.inspect(b.path).interface("eth0") is None
    assert len(env.ipam_files()) == 1
    # Another protocol on the same host port is a different mapping.
    env.nets.setup(env.owner(1), b.path, "bridge", [PortMapping(host_port, 80, "udp")])
    env.nets.teardown(env.owner(0), a.path, "bridge")
    env.nets.teardown(env.owner(1), b.path, "bridge")
    assert env.rules() == []


def test_concurrent_setups_cannot_share_a_port(env: Env) -> None:
    spaces = [env.new_netns(n) for n in range(4)]
    host_port = free_port()
    outcomes: list[str] = []

    def attach(n: int) -> None:
        try:
            env.nets.setup(env.owner(n), spaces[n].path, "bridge", [PortMapping(host_port, 80)])
            outcomes.append("ok")
        except AlreadyExists:
            outcomes.append("taken")

    threads = [threading.Thread(target=attach, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "taken", "taken", "taken"]
    assert len(env.ipam_files()) == 1


def test_setup_is_idempotent_across_a_crash(env: Env) -> None:
    ns = env.new_netns()
    adds = count_adds(env.nets)
    port = free_port()
    first = env.nets.setup(env.owner(), ns.path, "bridge", [PortMapping(port, 80)])
    second = env.nets.setup(env.owner(), ns.path, "bridge", [PortMapping(port, 80)])
    assert second == first
    assert adds == [env.owner()]
    assert env.ipam_files() == first.addresses()

    # The process dies: a new one, with a new Networks and CNI, comes back up.
    env.nets = env.networks()
    adds = count_adds(env.nets)
    again = env.nets.setup(env.owner(), ns.path, "bridge", [PortMapping(port, 80)])
    assert again == first
    assert adds == []
    assert env.ipam_files() == first.addresses()
    with pytest.raises(FailedPrecondition, match="tear it down"):
        env.nets.setup(env.owner(), ns.path, "bridge", [PortMapping(port, 81)])
    env.nets.teardown(env.owner(), ns.path, "bridge")


def test_stale_attachment_is_replaced(env: Env) -> None:
    ns = env.new_netns()
    first = env.nets.setup(env.owner(), ns.path)
    # The interface is lost (someone deleted it): DEL the stale record, then ADD.
    assert sh("ip", "-n", ns.name, "link", "del", "eth0").returncode == 0
    second = env.nets.setup(env.owner(), ns.path)
    assert nsinfo.inspect(ns.path).interface("eth0") is not None
    assert env.ipam_files() == second.addresses()
    # The namespace is removed and re-created under the same name (a reboot, a
    # half-done group down): its old address and masquerade rule are released.
    netns.remove(ns.path)
    ns = env.new_netns()
    third = env.nets.setup(env.owner(), ns.path)
    assert env.ipam_files() == third.addresses()
    old = {*first.addresses(), *second.addresses()} - set(third.addresses())
    assert not any(f"{ip}/32" in line for ip in old for line in iptables_dump().splitlines())
    wait_ports(env, 1, "the old namespace's veth goes when the kernel frees it")
    env.nets.teardown(env.owner(), ns.path, "bridge")


def test_teardown_after_namespace_removed(env: Env) -> None:
    ns = env.new_netns()
    env.nets.setup(env.owner(), ns.path, "bridge", [PortMapping(free_port(), 80)])
    assert env.rules() != []
    netns.remove(ns.path)
    env.nets.teardown(env.owner(), ns.path, "bridge")
    assert env.ipam_files() == []
    assert env.rules() == []  # masquerade and portmap rules included
    wait_ports(env, 0, "the veth goes with the namespace, freed asynchronously")
    env.nets.teardown(env.owner(), None, "bridge")


def test_subnet_overlapping_a_host_route(env: Env) -> None:
    clash = new_bridge_name()
    env.bridges.add(clash)
    gw = env.gateway
    for cmd in (
        ("ip", "link", "add", clash, "type", "bridge"),
        ("ip", "addr", "add", f"{gw}/{env.subnet.prefixlen}", "dev", clash),
        ("ip", "link", "set", clash, "up"),
    ):
        assert sh(*cmd).returncode == 0
    ns = env.new_netns()
    with pytest.raises(InvalidArgument, match=f"^subnet {env.subnet} overlaps host route"):
        env.nets.setup(env.owner(), ns.path, "bridge")
    assert sh("ip", "link", "show", env.bridge).returncode != 0  # nothing was made
    assert not env.ipam_dir.exists()
    assert env.nets.attachments() == []
    assert nsinfo.inspect(ns.path).interface("eth0") is None
    sh("ip", "link", "del", clash)


def test_own_bridge_route_is_not_an_overlap(env: Env) -> None:
    a, b = env.new_netns(0), env.new_netns(1)
    env.nets.setup(env.owner(0), a.path)
    # The bridge now routes the subnet; a second group, and a fresh process, still attach.
    env.nets.setup(env.owner(1), b.path)
    env.networks().check_subnet()
    for n, ns in enumerate((a, b)):
        env.nets.teardown(env.owner(n), ns.path, "bridge")


def test_cni_modes(env: Env) -> None:
    ns = env.new_netns()
    with pytest.raises(InvalidArgument, match="no CNI network"):
        env.nets.setup(env.owner(), ns.path, f"cni:{env.tag}missing")

    env.conf_dir.mkdir()
    broken = cni.bridge_conflist(f"{env.tag}broken", new_bridge_name(), str(free_subnet()))
    data = broken.to_json()
    data["plugins"].append({"type": "cxt-not-installed"})
    (env.conf_dir / "broken.conflist").write_text(json.dumps(data))
    adds = count_adds(env.nets)
    with pytest.raises(InvalidArgument, match="cxt-not-installed"):
        env.nets.setup(env.owner(), ns.path, f"cni:{env.tag}broken")
    assert adds == []

    user_bridge = new_bridge_name()
    env.bridges.add(user_bridge)
    subnet = free_subnet()
    user = cni.bridge_conflist(
        f"{env.tag}user", user_bridge, str(subnet), ports=False, ipam_dir=str(env.ipam_dir)
    )
    (env.conf_dir / "user.conflist").write_text(json.dumps(user.to_json()))
    mode = f"cni:{env.tag}user"
    with pytest.raises(InvalidArgument, match="no portmap plugin"):
        env.nets.setup(env.owner(), ns.path, mode, [PortMapping(free_port(), 80)])
    assert adds == []
    att = env.nets.setup(env.owner(), ns.path, mode)
    assert (att.mode, att.network) == (mode, f"{env.tag}user")
    assert ipaddress.ip_interface(att.ips[0]).network == subnet
    assert env.nets.attachments() == [att]
    assert env.nets.setup(env.owner(), ns.path, mode) == att
    assert adds == [env.owner()]
    env.nets.teardown(env.owner(), ns.path, mode)
    assert env.ipam_files(f"{env.tag}user") == []
    assert not any(str(subnet)[:-4] in line for line in iptables_dump().splitlines())


def test_none_mode_keeps_loopback_only(env: Env) -> None:
    ns = env.new_netns()
    att = env.nets.setup(env.owner(), ns.path, "none")
    assert att.ips == ()
    assert [i.name for i in nsinfo.inspect(ns.path).interfaces] == ["lo"]
    with pytest.raises(InvalidArgument, match="host"):
        env.nets.setup(env.owner(), "/proc/self/ns/net", "none")
    env.nets.teardown(env.owner(), ns.path, "none")


def test_remove_bridge(env: Env) -> None:
    assert env.nets.remove_bridge() is False  # not there yet
    ns = env.new_netns()
    env.nets.setup(env.owner(), ns.path)
    with pytest.raises(FailedPrecondition, match="still has interfaces attached"):
        env.nets.remove_bridge()
    env.nets.teardown(env.owner(), ns.path, "bridge")
    assert env.nets.remove_bridge() is True
    assert sh("ip", "link", "show", env.bridge).returncode != 0
    assert env.rules() == []
    assert env.nets.remove_bridge() is False


def test_remove_bridge_waits_for_veths_of_removed_namespaces(env: Env) -> None:
    """``network prune`` right after namespaces went with their eth0 inside: the host
    veths stay on the bridge until the kernel frees the namespaces, asynchronously,
    and must not make prune refuse."""
    spaces = [env.new_netns(n) for n in range(3)]
    for n, ns in enumerate(spaces):
        env.nets.setup(env.owner(n), ns.path)
    for ns in spaces:
        netns.remove(ns.path)
    assert env.nets.remove_bridge() is True
    assert sh("ip", "link", "show", env.bridge).returncode != 0
    for n, ns in enumerate(spaces):  # release the addresses; the bridge is gone already
        env.nets.teardown(env.owner(n), ns.path, "bridge")


def test_remove_bridge_refuses_a_live_port_at_once(env: Env) -> None:
    live, gone = env.new_netns(0), env.new_netns(1)
    env.nets.setup(env.owner(0), live.path)
    env.nets.setup(env.owner(1), gone.path)
    netns.remove(gone.path)
    env.nets.teardown(env.owner(1), gone.path, "bridge")
    # Refused as in use, not after waiting out the bound as if it were going away.
    with pytest.raises(FailedPrecondition, match="still has interfaces attached: veth") as info:
        env.nets.remove_bridge(timeout=30)
    assert "namespace is gone" not in str(info.value)
    env.nets.teardown(env.owner(0), live.path, "bridge")
    assert env.nets.remove_bridge() is True


def test_fifty_cycles_leave_nothing(env: Env) -> None:
    for cycle in range(50):
        ns = env.new_netns(cycle)
        ports = [PortMapping(free_port(), 80)] if cycle % 2 else []
        att = env.nets.setup(env.owner(cycle), ns.path, "bridge", ports)
        assert len(att.ips) == 1
        if cycle % 5 == 4:  # now and then, the namespace goes first
            netns.remove(ns.path)
            env.nets.teardown(env.owner(cycle), ns.path, "bridge")
        else:
            env.nets.teardown(env.owner(cycle), ns.path, "bridge")
            netns.remove(ns.path)
    assert env.ipam_files() == []
    assert env.rules() == []
    assert env.nets.attachments() == []
    assert [p.name for p in Path("/run/netns").glob(f"{env.tag}*")] == []
    wait_ports(env, 0, "the last cycle removed its namespace first")
