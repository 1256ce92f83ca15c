"""A bridged two-task group to damage, and the checks that say it is one group again.

Issue 20's scenarios all start from the same group: an HTTP server ``srv`` with
``restart = "always"`` and a client ``cli`` that calls it on localhost, sharing one
namespace, with a published host port, on a bridge, subnet, CNI cache and IPAM
directory of the test's own. Each scenario damages what ctrexec did not remove,
repairs it as an operator would, and then asks :meth:`Bridged.problems`, which looks
at the kernel, not at ctrexec's labels:

- every member runs, and all of them and the pin are one namespace (by inode);
- that namespace has one address on eth0;
- an ARP request from a probe namespace on the bridge gets one MAC for it;
- the client reaches the server on localhost, and the host reaches the published port.

:meth:`Bridged.down_clean` then takes the group down (the first ``group down`` must
succeed) and checks that nothing of it is left anywhere.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _chaoslib import bundle_procs, bundles, cgroup_dirs, kill_strays, strays, wait_for
from _cli import CLI_PROG, cli_argv

from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.net import hostfiles

SUBNET = "10.231.197.0/24"
#: The probe namespace's own address on the test bridge (host-local hands out from .2 up).
PROBE_ADDRESS = "10.231.197.250/24"
SERVER = "mkdir -p /tmp/www && echo ok > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
CLIENT = "while :; do wget -q -O /dev/null http://127.0.0.1:8080/; sleep 0.5; done"
MEMBERS = ("srv", "cli")
_REPLY = re.compile(r"reply from (\S+) \[([0-9A-Fa-f:]{17})\]")


def _task(name: str, image: str, script: str, restart: str | None) -> str:
    policy = f'restart = {{ policy = "{restart}" }}\n' if restart else ""
    return (
        f'[[task]]\nname = "{name}"\nimage = "{image}"\n'
        f'command = ["sh", "-c", {_quoted(script)}]\nstop_signal = "SIGKILL"\n{policy}'
    )


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


@attrs.define
class Bridged:
    """The group, its files and settings, and what tells it is sound."""

    client: Client
    name: str
    file: Path
    image: str
    bridge: str
    ipam: Path
    cache: Path
    logs: Path
    address: str
    namespace: str
    env: dict[str, str]
    host_port: int
    tmp: Path
    extras: list[str] = attrs.Factory(list)

    @property
    def prefix(self) -> str:
        return f"{self.name}-"

    @property
    def pin(self) -> str:
        """Where the group's namespace is pinned."""
        return f"/run/netns/cx-{self.name}"

    def member(self, task: str) -> str:
        return self.prefix + task

    def cli(self, command: str, *args: str) -> list[str]:
        return cli_argv(command, self.address, *args, namespace=self.namespace, log_dir=self.logs)

    def run(
        self, command: str, *args: str, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """One CLI call with the test's network settings."""
        return subprocess.run(
            self.cli(command, *args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def up(self, file: Path | None = None) -> None:
        done = self.run("group up", str(file or self.file))
        assert done.returncode == 0, done.stderr

    def extra(self, tag: str) -> tuple[str, Path]:
        """Another group on the same test network (one sleeping task, no ports), taken
        down after the test: a second group to share the bridge and the IPAM range."""
        name = f"{self.name}{tag}"
        file = self.tmp / f"{name}.toml"
        body = _task("t", self.image, "while :; do sleep 1; done", None)
        file.write_text(f'name = "{name}"\nnetwork = "bridge"\n{body}')
        self.extras.append(name)
        return name, file

    # ------------------------------------------------------------------ looking

    def member_pids(self) -> dict[str, int]:
        """The running members' task pids, by task name (``srv``, ``cli``)."""
        out = {}
        for task in MEMBERS:
            state = tasks.find(self.client, self.member(task))
            if state is not None and state.status is Status.RUNNING and state.pid:
                out[task] = state.pid
        return out

    def namespaces(self) -> dict[str, tuple[int, int]]:
        """Each running member's network namespace as (st_dev, st_ino); "pin" too if it
        is a mounted namespace."""
        out = {}
        for task, pid in self.member_pids().items():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/ns/net")
                out[task] = (st.st_dev, st.st_ino)
        if _is_nsfs(self.pin):
            st = os.stat(self.pin)
            out["pin"] = (st.st_dev, st.st_ino)
        return out

    def eth0(self, pid: int) -> tuple[list[str], str | None]:
        """The IPv4 addresses and the MAC of eth0 in ``pid``'s namespace."""
        out = _sh("nsenter", "-t", str(pid), "-n", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
        ips = [line.split()[3].split("/")[0] for line in out.stdout.splitlines()]
        link = _sh("nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "dev", "eth0")
        mac = re.search(r"link/ether (\S+)", link.stdout)
        return ips, mac.group(1).lower() if mac else None

    def group_address(self) -> str | None:
        """The one address of the group's namespace, None unless there is exactly one."""
        pids = self.member_pids()
        if not pids:
            return None
        ips, _ = self.eth0(next(iter(pids.values())))
        return ips[0] if len(ips) == 1 else None

    def arping(self, ip: str) -> set[str]:
        """The MACs that answer an ARP request for ``ip`` on the test bridge, asked from
        a namespace of the test's own that is attached for this one question."""
        ns, host, peer = (f"cxp{secrets.token_hex(3)}{s}" for s in ("", "a", "b"))
        try:
            for argv in (
                ("ip", "netns", "add", ns),
                ("ip", "link", "add", host, "type", "veth", "peer", "name", peer),
                ("ip", "link", "set", peer, "netns", ns),
                ("ip", "link", "set", host, "master", self.bridge, "up"),
                ("ip", "-n", ns, "addr", "add", PROBE_ADDRESS, "dev", peer),
                ("ip", "-n", ns, "link", "set", peer, "up"),
            ):
                done = _sh(*argv)
                assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
            out = _sh("ip", "netns", "exec", ns, "arping", "-c", "2", "-w", "3", "-I", peer, ip)
            return {mac.lower() for who, mac in _REPLY.findall(out.stdout) if who == ip}
        finally:
            _sh("ip", "link", "del", host)
            _sh("ip", "netns", "del", ns)

    def problems(self) -> list[str]:
        """What is wrong with the group now; [] when it is one sound group."""
        pids = self.member_pids()
        missing = [t for t in MEMBERS if t not in pids]
        if missing:
            return [f"not running: {', '.join(missing)}"]
        spaces = self.namespaces()
        if "pin" not in spaces:
            return [f"{self.pin} is not a mounted namespace"]
        if len(set(spaces.values())) != 1:
            return [f"more than one namespace: {spaces}"]
        ips, mac = self.eth0(pids["srv"])
        if len(ips) != 1:
            return [f"the namespace has {len(ips)} addresses on eth0: {ips}"]
        found = []
        local = self.run(
            "exec", self.member("cli"), "wget", "-q", "-O", "-", "http://127.0.0.1:8080/"
        )
        if local.returncode != 0 or local.stdout.strip() != "ok":
            found.append(
                f"localhost between members: exit {local.returncode} {local.stderr.strip()}"
            )
        published = _get(self.host_port)
        if published != "ok":
            found.append(f"published port {self.host_port}: {published}")
        if not Path(f"/sys/class/net/{self.bridge}").exists():
            return [*found, f"the bridge {self.bridge} is gone"]
        macs = self.arping(ips[0])
        if macs != {mac}:
            found.append(f"arping {ips[0]}: MACs {sorted(macs)}, eth0 has {mac}")
        return found

    def wait_sound(self, timeout: float = 120) -> None:
        """Wait (bounded) until :meth:`problems` finds nothing."""
        seen: list[list[str]] = []

        def sound() -> bool:
            seen.append(self.problems())
            return not seen[-1]

        try:
            wait_for(sound, "the group to be sound", timeout=timeout, interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last problems: {seen[-1] if seen else '?'}") from None

    # ------------------------------------------------------------------- ending

    def down_clean(self) -> None:
        """``group down`` (first call succeeds), ``network prune``, then nothing left."""
        for name in [self.name, *self.extras]:
            down = self.run("group down", name)
            assert down.returncode == 0, f"group down {name}: {down.stderr}"
        prune = subprocess.run(  # a host-wide verb: no --address or --namespace
            [*CLI_PROG, "network", "prune"], env=self.env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert prune.returncode == 0, prune.stderr
        try:
            wait_for(lambda: not self.leftovers(), "group down to leave nothing", timeout=20)
        except AssertionError:
            assert self.leftovers() == []

    def leftovers(self) -> list[str]:
        """Everything of the test's groups that is still there."""
        names = [self.name, *self.extras]
        ours = [c.id for c in containers.list_containers(self.client) if c.id.startswith(self.name)]
        state = Path(self.address).parent
        rules = _sh("iptables-save").stdout.splitlines()
        found = {
            "netns": [n for n in names if os.path.lexists(f"/run/netns/cx-{n}")],
            "mounts": [line for line in _mountinfo() if f"cx-{self.name}" in line],
            "bridge": [self.bridge] if Path(f"/sys/class/net/{self.bridge}").exists() else [],
            "IPAM addresses": sorted(p.name for p in self.ipam.rglob("10.*")),
            "CNI results": sorted(p.name for p in self.cache.rglob("*.json")),
            "iptables rules": [r for r in rules if SUBNET.rsplit(".", 2)[0] + "." in r
                               or any(f'id: "{n}"' in r for n in names)],
            "containers": ours,
            "tasks": [t.container_id for t in tasks.list_tasks(self.client) if t.container_id in ours],
            "host files": sorted(hostfiles.DEFAULT_DIR.glob(f"{self.namespace}+{self.name}*")),
            "logs": sorted(p.name for p in self.logs.glob("*")) if self.logs.exists() else [],
            "bundles": bundles(state, self.namespace, self.name),
            "processes": strays(self.address, self.namespace, self.name, self.logs)
            + bundle_procs(state, self.namespace, self.name),
            "cgroups": cgroup_dirs(self.namespace, self.name),
        }  # fmt: skip
        return [f"{what}: {left}" for what, left in found.items() if left]


def _is_nsfs(path: str) -> bool:
    """Whether ``path`` is a mounted network namespace (not a plain file left behind)."""
    try:
        return os.stat(path).st_dev != os.stat(os.path.dirname(path)).st_dev
    except OSError:
        return False


def _mountinfo() -> list[str]:
    return Path("/proc/self/mountinfo").read_text().splitlines()


def _get(port: int) -> str:
    """The body the host gets from the published port, or why it got none."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        return resp.read().decode().strip() if resp.status == 200 else f"HTTP {resp.status}"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def host_neighbour(g: Bridged, address: str) -> str | None:
    """The MAC of the host's neighbour entry for ``address`` on the test bridge; None if
    it has none (or one with no MAC: INCOMPLETE, FAILED)."""
    shown = _sh("ip", "neigh", "show", "to", address, "dev", g.bridge).stdout
    found = re.search(r"lladdr (\S+)", shown)
    return found.group(1).lower() if found else None


def hold_stale_entries(g: Bridged) -> None:
    """Keep the host's REACHABLE entries on the test bridge REACHABLE for ~30-90 min, not
    15-45 s: the old MAC then outlasts every bound below unless something replaces it,
    which is the defect made certain rather than a race with the kernel's own re-check.
    (The setting goes with the test's bridge.)"""
    Path(f"/proc/sys/net/ipv4/neigh/{g.bridge}/base_reachable_time_ms").write_text("3600000")


def group_file(name: str, image: str, host_port: int) -> str:
    """The group: ``srv`` (restart always) and ``cli``, one published port."""
    return (
        f'name = "{name}"\nnetwork = "bridge"\nports = ["127.0.0.1:{host_port}:8080"]\n'
        + _task("srv", image, SERVER, "always")
        + _task("cli", image, CLIENT, None)
    )


@pytest.fixture
def bridged(
    client: Client, containerd_address: str, test_image: str, tmp_path: Path
) -> Iterator[Bridged]:
    """The group's file and settings (not yet up); whatever a failure left is removed."""
    tag = secrets.token_hex(2)
    name = f"chaos-i{tag}"
    bridge = f"cxi{tag}"
    env = dict(
        os.environ,
        CTREXEC_NETWORK=bridge,
        CTREXEC_BRIDGE=bridge,
        CTREXEC_SUBNET=SUBNET,
        CTREXEC_CNI_CACHE_DIR=str(tmp_path / "cni-cache"),
        CTREXEC_IPAM_DIR=str(tmp_path / "ipam"),
    )
    port = free_port()
    file = tmp_path / "group.toml"
    file.write_text(group_file(name, test_image, port))
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    g = Bridged(
        client=client,
        name=name,
        file=file,
        image=test_image,
        bridge=bridge,
        ipam=tmp_path / "ipam",
        cache=tmp_path / "cni-cache",
        logs=tmp_path / "logs",
        address=containerd_address,
        namespace=client.namespace,
        env=env,
        host_port=port,
        tmp=tmp_path,
    )
    try:
        yield g
    finally:
        for group in [name, *g.extras]:
            g.run("group down", group)
        kill_strays(containerd_address, client.namespace, name, tmp_path)
        with contextlib.suppress(OSError):  # a pin the test's damage left unmounted
            os.unlink(g.pin)
        _sh("ip", "link", "del", bridge)
        Path("/proc/sys/net/ipv4/ip_forward").write_text(forward)
        for d in hostfiles.DEFAULT_DIR.glob(f"{client.namespace}+{name}*"):
            hostfiles.remove_dir(d)
