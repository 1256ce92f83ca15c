"""Waiting, supervising and scratch executors, as the task tests (executor, groups, --rm,
supervisor, events) do; groups on a bridge of their own, audited for leaks; an image
that exposes ports."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ctrexec import _rpc
from ctrexec._api.containerd.services.namespaces.v1 import namespace_pb2
from ctrexec._linux import mounts_under
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.errors import AlreadyExists, NotFound
from ctrexec.groups.supervisor import Supervisor
from ctrexec.groups.updown import Groups
from ctrexec.net.networks import Networks
from ctrexec.tasks.executor import Executor
from ctrexec.testing import wait_for


def create_namespace(client: Client) -> None:
    """Make the client's namespace exist now (containerd makes one lazily, at the first
    write), so that it is listed before anything is stored in it."""
    req = namespace_pb2.CreateNamespaceRequest(
        namespace=namespace_pb2.Namespace(name=client.namespace)
    )
    with contextlib.suppress(AlreadyExists):
        client._call(_rpc.NAMESPACES, "Create", req, namespace_pb2.CreateNamespaceResponse)


def until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Await state that containerd or the kernel reaches asynchronously, with a bound."""
    wait_for(predicate, timeout=timeout, what=what)


def stopped(client: Client, task_id: str) -> bool:
    """Whether its task has exited: containerd's state alone, so that no address lookup
    (as a running task's inspect makes) runs in a test's wait."""
    state = tasks.find(client, task_id)
    return state is not None and state.status is tasks.Status.STOPPED


@contextlib.contextmanager
def supervising(ex: Executor, **options: Any) -> Iterator[Supervisor]:
    """A Supervisor running in a thread for the block, as ``ctrexec supervise`` would."""
    sup = Supervisor(ex, **{"reconnect_delay": 0.2, **options})
    stop = threading.Event()
    thread = threading.Thread(target=sup.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield sup
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the supervisor did not stop"


@contextlib.contextmanager
def scratch_executor(client: Client, tmp_path: Path, prefix: str) -> Iterator[Executor]:
    """An Executor writing under ``tmp_path``; the containers named ``prefix*`` go after."""
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    try:
        yield executor
    finally:
        for info in executor.list(all_tasks=True):
            if info.id.startswith(prefix):
                executor.destroy(info.id, force=True)


def gone(client: Client, name: str) -> bool:
    """Whether containerd has no container record of this name."""
    try:
        containers.get(client, name)
    except NotFound:
        return True
    return False


@contextlib.contextmanager
def audited_groups(
    client: Client, tmp_path: Path, containerd_address: str, prefix: str, subnet: str
) -> Iterator[Groups]:
    """Groups on a bridge of their own (``prefix`` + a tag, ``subnet``); after, every
    group down and the bridge gone, nothing may be left: mounts, links, addresses, rules."""
    forward = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    tag = f"{prefix}{secrets.token_hex(2)}"
    nets = Networks(
        network=tag,
        bridge=tag,
        subnet=subnet,
        cache_dir=tmp_path / "cni-cache",
        ipam_dir=tmp_path / "ipam",
    )
    g = Groups(Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files"), nets)
    try:
        yield g
    finally:
        for name in g.names():
            g.down(name, timeout=1)
        for a in nets.attachments():
            nets.teardown(a.owner, None, a.mode)
        nets.remove_bridge()
        Path("/proc/sys/net/ipv4/ip_forward").write_text(forward)
    assert mounts_under(Path(containerd_address).parent.parent) == []
    assert not any(p.name.startswith(tag) for p in Path("/sys/class/net").iterdir())
    assert list((tmp_path / "ipam").rglob("10.*")) == []
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    network = subnet.rsplit(".", 1)[0] + "."
    assert tag not in rules and network not in rules


def build_exposing_image(archive: Path, name: str) -> None:
    """The test image under ``name``, with ExposedPorts 8080/tcp and 9000/udp, as an archive."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-test-image"
    subprocess.run(
        [sys.executable, str(script), "--out", str(archive), "--name", name,
         "--expose", "8080/tcp", "--expose", "9000/udp"],
        check=True, capture_output=True,
    )  # fmt: skip
