"""Client against a real, private containerd."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from _cli import CLI_PROG, TEST_NAMESPACE, Cli
from _support import create_namespace

from ctrexec import errors
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client

ROOT = Path(__file__).resolve().parents[2]


def test_version_and_namespaces(client: Client) -> None:
    v = client.version()
    assert v.version
    create_namespace(client)
    assert client.namespace in client.namespaces()


def test_lease_created_and_deleted(client: Client) -> None:
    with client.lease(labels={"test": "lease"}) as lease:
        ids = [le.id for le in client.leases()]
        assert lease.id in ids
        assert "containerd.io/gc.expire" in lease.labels
    assert lease.id not in [le.id for le in client.leases()]


def test_lease_deleted_after_error(client: Client) -> None:
    with pytest.raises(RuntimeError), client.lease() as lease:
        raise RuntimeError("boom")
    assert lease.id not in [le.id for le in client.leases()]


def test_missing_socket(tmp_path: Path) -> None:
    with pytest.raises(errors.ConnectError, match="does not exist"):
        Client.connect(str(tmp_path / "missing.sock"))


def test_bad_namespace_name(containerd_address: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        Client.connect(containerd_address, namespace="bad/name")
    with pytest.raises(errors.InvalidArgument):
        Client.connect(containerd_address, namespace="")


def test_dead_socket_is_connect_error(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # bound but nobody listening: connection refused
    with pytest.raises(errors.ConnectError, match="cannot reach containerd"):
        Client.connect(str(path), timeout=2.0)


def test_grpc_server_that_is_not_containerd(tmp_path: Path) -> None:
    path = tmp_path / "other.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        with pytest.raises(errors.ConnectError, match="does not serve containerd"):
            Client.connect(str(path), timeout=2.0)
    finally:
        server.stop(None)


def test_thread_safe_concurrent_calls(client: Client) -> None:
    results: list[str] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            for _ in range(20):
                v = client.version().version
                with client.lease() as _lease:
                    pass
                with lock:
                    results.append(v)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    assert len(results) == 160


def test_cli_info_json(containerd_address: str, cli: Cli) -> None:
    out = cli("info", "--json", namespace=None, check=True)
    info = json.loads(out.stdout)
    assert info["address"] == containerd_address
    assert "overlayfs" in info["snapshotters"]
    assert "io.containerd.runc.v2" in info["runtimes"]
    choice = info["address_choice"]
    assert (choice["address"], choice["source"]) == (containerd_address, "argument")


def test_cli_info_says_which_containerd_and_why(containerd_address: str, cli: Cli) -> None:
    """Two containerds on one host hold different tasks (issue 39): ``info`` names the
    socket it used and the reason, given ``--address`` or ``$CONTAINERD_ADDRESS``."""
    shown = cli("info", namespace=None, check=True).stdout
    assert f"address:       {containerd_address} (named explicitly (--address))\n" in shown
    env = {**os.environ, "CONTAINERD_ADDRESS": f"unix://{containerd_address}"}
    out = subprocess.run(
        [*CLI_PROG, "info", "--json"], env=env, capture_output=True, text=True, check=True
    )
    choice = json.loads(out.stdout)["address_choice"]
    assert choice == {
        "address": containerd_address,
        "source": "environment",
        "reason": "from $CONTAINERD_ADDRESS",
    }
    with Client.connect(containerd_address) as client:
        assert client.info().address_choice == client.address_choice
        assert client.address_choice.source == "argument"


def test_delete_namespace_only_when_empty(containerd_address: str) -> None:
    """A container record (no snapshot, no task) is enough to keep it."""
    with Client.connect(containerd_address, namespace=f"{TEST_NAMESPACE}-nsdelete") as c:
        create_namespace(c)
        containers.create(
            c, "cx-nsdelete", image="none", spec={"ociVersion": "1.0.2"},
            snapshotter="overlayfs", snapshot_key="cx-nsdelete",
            runtime=containers.Runtime("io.containerd.runc.v2"), labels={},
        )  # fmt: skip
        try:
            with pytest.raises(errors.FailedPrecondition):
                c.delete_namespace()
            assert c.namespace in c.namespaces()
        finally:
            containers.delete(c, "cx-nsdelete")
        c.delete_namespace()
        assert c.namespace not in c.namespaces()
        with pytest.raises(errors.NotFound):
            c.delete_namespace()
