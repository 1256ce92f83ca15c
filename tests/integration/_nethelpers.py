"""The network harness of test_cni and test_networks (and free_port for test_groups).

Traffic stays on loopback or inside the namespaces and bridges these tests make.
Every name carries the run tag (namespaces, networks and groups ``cxt...``, bridges
``cxtbr<hex>``). Subnets are /24s of 10.231.200.0 .. 10.231.250.0 (test_groups keeps
10.231.180.0/24 for itself), unused on the host when picked and never handed out twice
in one run, so a test that asks for a second one before the first is routed gets
another. Cache and IPAM dirs live under tmp_path. Each test ends with a leak audit
after its cleanup; the modules put net.ipv4.ip_forward back (``restore_ip_forward``
in conftest.py) and check that nothing of the run tag is left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ctrexec.net import netns

PLUGIN_DIR = Path("/usr/lib/cni")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
#: Short, because names made from it (``<tag><test>-ns<n>``) must stay valid ids.
RUN_TAG = f"cxt{os.getpid() % 100000}{uuid.uuid4().hex[:3]}"
SUBNET_THIRDS = range(200, 251)
_taken_subnets: set[int] = set()

#: ``pytestmark`` of a module of these tests.
NET_MARKS = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="CNI plugins need root"),
    pytest.mark.skipif(
        not (PLUGIN_DIR / "bridge").exists(), reason="containernetworking-plugins missing"
    ),
    pytest.mark.usefixtures("restore_ip_forward"),
]


def sh(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=False, capture_output=True, text=True)


def link_exists(name: str) -> bool:
    return sh("ip", "link", "show", name).returncode == 0


def iptables_dump() -> str:
    return "".join(sh(tool).stdout for tool in ("iptables-save", "ip6tables-save"))


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.231.200-250 with no route or address on the host right now."""
    used = sh("ip", "-4", "route").stdout + sh("ip", "-4", "addr").stdout
    candidates = [n for n in SUBNET_THIRDS if n not in _taken_subnets]
    random.shuffle(candidates)
    for third in candidates:
        if f"10.231.{third}." not in used:
            _taken_subnets.add(third)
            return ipaddress.IPv4Network(f"10.231.{third}.0/24")
    raise RuntimeError("no free test subnet in 10.231.200.0/24 .. 10.231.250.0/24")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_bridge_name() -> str:
    return f"cxtbr{uuid.uuid4().hex[:6]}"


def ping(ns: netns.NetNS, address: str) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns.name, "busybox", "ping", "-c1", "-W2", address)


def fetch(port: int) -> bytes:
    """What a server behind ``port`` on 127.0.0.1 says, once its mapping is in place."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
                return s.recv(64)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class NetEnv:
    """One test's network objects: what it made, how to clean it up and audit it.

    Subclasses bring the runtime under test (``CNI`` or ``Networks``): its network
    name, its attachments, how to detach them, and how to check links are gone.
    """

    network: str

    def __init__(self, tmp_path: Path, tag: str) -> None:
        self.tag = f"{RUN_TAG}{tag}"
        self.bridge = new_bridge_name()
        self.bridges = {self.bridge}
        self.subnet = free_subnet()
        self.ipam_dir = tmp_path / "ipam"
        self.cache_dir = tmp_path / "cache"
        self.conf_dir = tmp_path / "conf"
        self.namespaces: list[netns.NetNS] = []
        self.procs: list[subprocess.Popen[Any]] = []

    def new_netns(self, n: int = 0) -> netns.NetNS:
        ns = netns.create(f"{self.tag}-ns{n}")
        self.namespaces.append(ns)
        return ns

    def ipam_files(self, network: str | None = None) -> list[str]:
        """Addresses host-local holds (its lock and last_reserved files aside)."""
        folder = self.ipam_dir / (network or self.network)
        if not folder.exists():
            return []
        return sorted(p.name for p in folder.iterdir() if p.name[0].isdigit())

    def rules(self) -> list[str]:
        """iptables lines that name this test's tag, subnet or bridges."""
        marks = (self.tag, f"{self.subnet.network_address}"[:-1], *self.bridges)
        return [line for line in iptables_dump().splitlines() if any(m in line for m in marks)]

    def serve_once(self, ns: netns.NetNS, port: int, reply: bytes) -> None:
        """A one-shot TCP server inside ``ns``, started by pid and killed by cleanup."""
        server = (
            "import socket, sys\n"
            "s = socket.socket()\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('0.0.0.0', {port})); s.listen()\n"
            "print('ready', flush=True)\n"
            f"c, _ = s.accept(); c.sendall({reply!r}); c.close()\n"
        )
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-c", server],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    def attachments(self) -> list[Any]:
        raise NotImplementedError

    def detach_all(self) -> None:
        raise NotImplementedError

    def remove_bridges(self) -> None:
        for bridge in self.bridges:
            sh("ip", "link", "del", bridge)

    def audit_links(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.communicate()
        self.detach_all()
        for ns in self.namespaces:
            if os.path.lexists(ns.path):
                netns.remove(ns.path)
        self.remove_bridges()

    def audit(self) -> None:
        leftovers = [p.name for p in Path("/run/netns").glob(f"{self.tag}*")]
        assert leftovers == [], "namespaces left behind"
        self.audit_links()
        assert self.rules() == [], "iptables rules left behind"
        assert self.ipam_files() == [], "IPAM allocations left behind"
        assert self.attachments() == []
        assert sh("ip", "-4", "route", "show", str(self.subnet)).stdout == ""


E = TypeVar("E", bound=NetEnv)


def tag_of(request: pytest.FixtureRequest, width: int) -> str:
    """A test's short tag, from its name: part of every name the test makes."""
    return request.node.name.replace("test_", "").replace("_", "")[:width]


def run_env(env: E) -> Iterator[E]:
    """The body of an ``env`` fixture: clean up whatever happened, then audit."""
    try:
        yield env
    finally:
        env.cleanup()
    env.audit()


@contextlib.contextmanager
def cli_bridge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, subnet: str) -> Iterator[str]:
    """ctrexec's bridge network under test names, for the CLI through its ``CTREXEC_*``
    settings; everything of it is gone after (audited)."""
    name = f"cxtr{secrets.token_hex(2)}"
    monkeypatch.setenv("CTREXEC_NETWORK", name)
    monkeypatch.setenv("CTREXEC_BRIDGE", name)
    monkeypatch.setenv("CTREXEC_SUBNET", subnet)
    monkeypatch.setenv("CTREXEC_CNI_CACHE_DIR", str(tmp_path / "cni-cache"))
    monkeypatch.setenv("CTREXEC_IPAM_DIR", str(tmp_path / "ipam"))
    forward = IP_FORWARD.read_text()
    try:
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        IP_FORWARD.write_text(forward)
    assert list((tmp_path / "ipam").rglob("10.*")) == [], "an address stayed allocated"
    assert list((tmp_path / "cni-cache").rglob("*-eth0")) == [], "a CNI result stayed"
    owned = list((tmp_path / "cni-cache" / "owners").glob("*"))
    assert owned == [], "an attachment's owner record stayed (its DEL removes it)"
    prefix = subnet.rsplit(".", 1)[0] + "."
    assert prefix not in iptables_dump(), "a port mapping or masquerade rule stayed"
