"""Fixtures of the Nomad harness: the plugin's containerd namespace, its image, the
boot sequence that leaves the long-lived instance, and an allocation's network."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))

from _allocnet import GroupNetwork
from _harness import AllocDir
from _node import NOMAD_NAMESPACE, Node, agent_config


@pytest.fixture(scope="module")
def restore_ip_forward() -> Iterator[None]:
    """CNI's bridge plugin turns net.ipv4.ip_forward on; put it back."""
    flag = Path("/proc/sys/net/ipv4/ip_forward")
    before = flag.read_text()
    yield
    flag.write_text(before)


@pytest.fixture(scope="session")
def nomad_image(containerd_address: str, test_image_archive: Path) -> str:
    from ctrexec.testing import import_image

    import_image(containerd_address, NOMAD_NAMESPACE, test_image_archive)
    return "docker.io/library/ctrexec-test:latest"


@pytest.fixture(scope="session")
def nomad_client(containerd_address: str) -> Iterator[Any]:
    """The plugin's namespace; the session fails if a test left anything in it."""
    from ctrexec.containerd.client import Client
    from ctrexec.testing import audit

    c = Client.connect(containerd_address, namespace=NOMAD_NAMESPACE)
    try:
        yield c
        leftovers = audit(c)
        assert not leftovers, f"nomad tests leaked in containerd: {leftovers}"
    finally:
        c.close()


@pytest.fixture
def node(containerd_address: str, nomad_image: str, nomad_client: Any) -> Iterator[Node]:
    n = Node(containerd_address, agent_config(containerd_address))
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def alloc(tmp_path: Path) -> Iterator[AllocDir]:
    a = AllocDir(tmp_path / "allocs", str(uuid.uuid4()))
    try:
        yield a
    finally:
        a.close()


@pytest.fixture
def group(tmp_path: Path, alloc: AllocDir) -> Iterator[GroupNetwork]:
    g = GroupNetwork(tmp_path, alloc.alloc_id)
    try:
        yield g
    finally:
        g.close()
    assert not Path(g.path).exists()
