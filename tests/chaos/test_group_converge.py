"""``group up`` SIGKILLed anywhere in its run, then run again: the rerun converges.

The seed scenario of a scheduler's executor: it dies in the middle of its work, and
the same command, run again, must finish that work, with the group's one address,
and ``group down`` must then leave nothing: no namespace, veth, address, container,
host files, bundle or process. The kill times are spread over a normal run's whole
duration, measured here (the machine may be slow today), not fixed: a kill inside
``Tasks.Create`` leaves a shim and a bundle that containerd no longer knows.

Everything runs through the real CLI on the session's containerd, with a bridge,
subnet and CNI directories of this test's own (``CTREXEC_*``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from _chaoslib import bundle_procs, bundles, cgroup_dirs, kill_strays, shims, strays, wait_for
from _cli import cli_argv
from _sweep import remove_runc_state, shim_serves

from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.containerd.tasks import Status
from ctrexec.net import hostfiles, netns
from ctrexec.tasks.executor import Executor

SUBNET = "10.231.193.0/24"
ROUNDS = 50
#: Stops at once on group down (the tasks' shell would ignore SIGTERM as pid 1).
SCRIPT = "while :; do sleep 0.1; done"


@attrs.frozen
class GroupEnv:
    """One bridged two-task group, driven through the CLI, and where its traces live."""

    name: str
    file: Path
    bridge: str
    ipam: Path
    cache: Path
    logs: Path
    address: str
    namespace: str
    env: dict[str, str]

    @property
    def prefix(self) -> str:
        return f"{self.name}-"

    def cli(self, command: str, *args: str) -> list[str]:
        return cli_argv(command, self.address, *args, namespace=self.namespace, log_dir=self.logs)

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cli(command, *args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def addresses(self) -> list[str]:
        """The addresses host-local holds for the test's network."""
        return sorted(p.name for p in self.ipam.rglob("10.*"))

    def bridge_ports(self) -> list[str]:
        out = subprocess.run(
            ["ip", "-o", "link", "show", "master", self.bridge],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return [line.split(":")[1].strip() for line in out.splitlines()]


@pytest.fixture
def group(
    client: Client,
    containerd_address: str,
    test_image: str,
    tmp_path: Path,
    session_ex: Executor,
) -> Iterator[GroupEnv]:
    """The group's file and settings; whatever a failure left is removed after."""
    tag = secrets.token_hex(2)
    name = f"chaos-g{tag}"
    bridge = f"cxtk{tag}"
    env = dict(
        os.environ,
        CTREXEC_NETWORK=bridge,
        CTREXEC_BRIDGE=bridge,
        CTREXEC_SUBNET=SUBNET,
        CTREXEC_CNI_CACHE_DIR=str(tmp_path / "cni-cache"),
        CTREXEC_IPAM_DIR=str(tmp_path / "ipam"),
    )
    task = (
        '[[task]]\nname = "{}"\nimage = "' + test_image + '"\n'
        f'command = ["sh", "-c", {json.dumps(SCRIPT)}]\nstop_signal = "SIGKILL"\n'
    )
    file = tmp_path / "group.toml"
    file.write_text(f'name = "{name}"\nnetwork = "bridge"\n' + task.format("a") + task.format("b"))
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    g = GroupEnv(
        name=name,
        file=file,
        bridge=bridge,
        ipam=tmp_path / "ipam",
        cache=tmp_path / "cni-cache",
        logs=tmp_path / "logs",
        address=containerd_address,
        namespace=client.namespace,
        env=env,
    )
    try:
        yield g
    finally:
        g.run("group down", name)
        kill_strays(containerd_address, client.namespace, g.prefix, tmp_path)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        Path("/proc/sys/net/ipv4/ip_forward").write_text(forward)
        for d in hostfiles.DEFAULT_DIR.glob(f"{client.namespace}+{g.prefix}*"):
            hostfiles.remove_dir(d)


def _timed_up(g: GroupEnv) -> float:
    began = time.monotonic()
    up = g.run("group up", str(g.file))
    took = time.monotonic() - began
    assert up.returncode == 0, up.stderr
    down = g.run("group down", g.name)
    assert down.returncode == 0, down.stderr
    return took


def _running(client: Client, g: GroupEnv) -> list[str]:
    """What is wrong with the group as the rerun left it (nothing: both tasks run)."""
    problems = []
    for task in ("a", "b"):
        state = tasks.find(client, g.prefix + task)
        if state is None or state.status is not Status.RUNNING:
            problems.append(f"task {task}: {state}")
    held = g.addresses()
    if len(held) != 1:
        problems.append(f"the group holds {len(held)} addresses: {held}")
    return problems


def _leftovers(client: Client, g: GroupEnv) -> list[str]:
    """Everything of the group that is still there after group down."""
    ours = [c.id for c in containers.list_containers(client) if c.id.startswith(g.prefix)]
    state = Path(g.address).parent
    found = {
        "netns": [p for p in [netns.resolve(f"cx-{g.name}")] if os.path.lexists(p)],
        "bridge ports (veths)": g.bridge_ports(),
        "IPAM addresses": g.addresses(),
        "CNI results": sorted(p.name for p in g.cache.rglob("*-eth0")),
        "containers": ours,
        "tasks": [t.container_id for t in tasks.list_tasks(client) if t.container_id in ours],
        "host files": sorted(hostfiles.DEFAULT_DIR.glob(f"{g.namespace}+{g.prefix}*")),
        "bundles": bundles(state, g.namespace, g.prefix),
        "processes": strays(g.address, g.namespace, g.prefix, g.logs)
        + bundle_procs(state, g.namespace, g.prefix),
        "cgroups": cgroup_dirs(g.namespace, g.prefix),
    }
    return [f"{what}: {left}" for what, left in found.items() if left]


def _gone(client: Client, g: GroupEnv) -> list[str]:
    """:func:`_leftovers` once what the kernel and shims do afterwards had its time."""
    try:
        wait_for(lambda: not _leftovers(client, g), "group down to leave nothing", timeout=15)
    except AssertionError:
        return _leftovers(client, g)
    return []


def test_group_up_killed_anywhere_then_rerun_converges(client: Client, group: GroupEnv) -> None:
    """50 kills spread over a normal ``group up``; every rerun succeeds and cleans up."""
    g = group
    _timed_up(g)  # the first one makes the bridge and warms the caches
    took = _timed_up(g)
    delays = [took * (i + random.random()) / ROUNDS for i in range(ROUNDS)]
    failures = []
    seen = []
    for delay in delays:
        child = subprocess.Popen(
            g.cli("group up", str(g.file)),
            env=g.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        killed = child.poll() is None
        if killed:
            os.kill(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=180)
        assert killed or child.returncode == 0, stderr
        rerun = g.run("group up", str(g.file))
        if rerun.returncode:
            problems = [f"rerun exit {rerun.returncode}: {rerun.stderr.strip()}"]
        else:
            problems = _running(client, g)
        down = g.run("group down", g.name)
        if down.returncode:
            problems.append(f"group down exit {down.returncode}: {down.stderr.strip()}")
        problems += _gone(client, g)
        seen.append(f"{delay:.3f}s {'killed' if killed else 'finished'}: {problems or 'ok'}")
        if problems:
            failures.append(seen[-1])
            kill_strays(g.address, g.namespace, g.prefix, g.logs)
            # runc's state of a container killed with its shim stays, and refuses the
            # next create of its id: one failed round must not fail the rounds after it.
            with contextlib.suppress(AssertionError):  # it touches nothing while one runs
                wait_for(lambda: not shims(g.address, g.namespace), "the shims to go", timeout=10)
            remove_runc_state(g.namespace, served=shim_serves(g.namespace))
    print(f"a normal group up took {took:.3f}s;", *seen, sep="\n  ")
    assert failures == [], f"{len(failures)} of {ROUNDS} rounds failed:\n" + "\n".join(failures)
