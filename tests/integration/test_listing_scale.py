"""No cliff in the listing (issue 40): 2,000 container records of ~10 KB each are
20 MB, more than gRPC's 16 MiB message, so containerd refuses to send them as one
List answer; read again one record a message (ListStream), every listing verb sees
them all, and doctor's checks, which list them too, run.

The records are made straight in containerd (created, never started: no snapshot, no
task), in a namespace of this test's own so no other test's listing sees them, and
each is deleted at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import create_namespace

from ctrexec import Client, Executor, _rpc, list_tasks
from ctrexec import labels as lbl
from ctrexec._api.containerd.services.containers.v1 import containers_pb2
from ctrexec.containerd import containers

COUNT = 2_000
SPEC_BYTES = 10_000
THREADS = 8


def _spec(cid: str) -> dict[str, object]:
    """A spec of ~10 KB, as a real task's is with its mounts, env and seccomp profile."""
    pad = SPEC_BYTES - 200
    env = [f"PAD{i}={'x' * 90}" for i in range(pad // 100)]
    return {"ociVersion": "1.1.0", "hostname": cid, "process": {"args": ["true"], "env": env}}


def _make(client: Client, cid: str) -> None:
    containers.create(
        client,
        cid,
        image="docker.io/library/busybox:latest",
        spec=_spec(cid),
        snapshotter="",
        snapshot_key="",
        runtime=containers.Runtime("io.containerd.runc.v2"),
        labels={lbl.MANAGED: "true"},
    )


@pytest.fixture(scope="module")
def many(containerd_address: str) -> Iterator[tuple[Client, list[str]]]:
    """A namespace holding COUNT records; each one made is deleted at the end, then the
    namespace."""
    client = Client.connect(containerd_address, namespace=f"{TEST_NAMESPACE}-scale")
    create_namespace(client)
    ids = [f"scale-{i:04d}" for i in range(COUNT)]
    made: list[str] = []  # each id once containerd has it, whatever fails after

    def make(cid: str) -> None:
        _make(client, cid)
        made.append(cid)

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(make, ids))
        yield client, ids
    finally:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lambda c: containers.delete(client, c), made))
        client.delete_namespace()
        client.close()


def test_the_records_pass_one_message(many: tuple[Client, list[str]]) -> None:
    client, ids = many
    one = client._call(
        _rpc.CONTAINERS,
        "Get",
        containers_pb2.GetContainerRequest(id=ids[0]),
        containers_pb2.GetContainerResponse,
    )
    # What makes the test: the namespace's records would not fit one answer.
    assert one.container.ByteSize() * COUNT > _rpc.MAX_MESSAGE_BYTES


def test_list_containers_reads_every_record(many: tuple[Client, list[str]]) -> None:
    client, ids = many
    found = containers.list_containers(client, containers.label_filter(lbl.MANAGED, "true"))
    assert sorted(c.id for c in found) == ids


def test_list_tasks_and_the_executor_list_every_container(
    many: tuple[Client, list[str]], tmp_path: Path
) -> None:
    client, ids = many
    executor = Executor(client, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    assert [i.id for i in list_tasks(client)] == []  # none runs
    assert [i.id for i in list_tasks(client, all_tasks=True)] == ids
    assert [i.id for i in executor.list(all_tasks=True)] == ids


def test_ps_lists_every_container(many: tuple[Client, list[str]], cli: Cli) -> None:
    client, ids = many
    out = cli("ps", "-a", "-q", namespace=client.namespace, check=True)
    assert sorted(out.stdout.splitlines()) == ids


def test_doctor_checks_every_container(many: tuple[Client, list[str]], cli: Cli) -> None:
    """Each of doctor's checks that lists the containers ran: with List they all said
    "could not check" (ResourceExhausted)."""
    client, _ = many
    out = cli("doctor", "--json", namespace=client.namespace, check=True)
    unchecked = [f for f in json.loads(out.stdout) if f["What"].startswith("could not check")]
    assert unchecked == []
