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

from _harness import AllocDir, PluginProcess, cty_encode

from ctrexec._api.nomad.base import base_pb2
from ctrexec._api.nomad.drivers import driver_pb2 as dpb

NOMAD_NAMESPACE = "ctrexec-nomad-test"


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


def agent_config(containerd_address: str, **extra: Any) -> dict[str, Any]:
    """The agent file's ``plugin "nomad-driver-ctrexec" { config { ... } }`` block."""
    return {"address": containerd_address, "namespace": NOMAD_NAMESPACE, **extra}


def nomad_config() -> base_pb2.NomadConfig:
    cfg = base_pb2.NomadConfig()
    cfg.driver.ClientMinPort = 14000
    cfg.driver.ClientMaxPort = 14512
    return cfg


class Node:
    """The long-lived plugin instance and what Nomad's client keeps of it."""

    def __init__(self, address: str, config: dict[str, Any]) -> None:
        self.address = address
        self.config = config
        self.plugin = self.launch()
        self.started: list[str] = []

    def launch(self) -> PluginProcess:
        """Process #3 of the boot sequence: SetConfig with a NomadConfig, then Init."""
        p = PluginProcess()
        schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        p.base.SetConfig(
            base_pb2.SetConfigRequest(
                msgpack_config=cty_encode(schema, self.config),
                nomad_config=nomad_config(),
                plugin_api_version="v0.1.0",
            ),
            timeout=30,
        )
        p.driver.Init(dpb.InitRequest(), timeout=30)
        self.task_spec = p.driver.TaskConfigSchema(dpb.TaskConfigSchemaRequest(), timeout=10).spec
        return p

    def start(self, tc: dpb.TaskConfig) -> dpb.StartTaskResponse:
        self.started.append(tc.id)
        return self.plugin.driver.StartTask(dpb.StartTaskRequest(task=tc), timeout=60)

    def wait(self, task_id: str, timeout: float = 60) -> dpb.ExitResult:
        resp = self.plugin.driver.WaitTask(dpb.WaitTaskRequest(task_id=task_id), timeout=timeout)
        assert not resp.err, resp.err
        return resp.result

    def cleanup(self) -> None:
        if not self.plugin.alive:  # a test killed it: Nomad would start a new one
            self.plugin = self.launch()
        for task_id in self.started:
            self.plugin.driver.DestroyTask(
                dpb.DestroyTaskRequest(task_id=task_id, force=True), timeout=60
            )
        self.plugin.kill()
        assert not Path(self.plugin.address).parent.exists(), "plugin socket dir left behind"


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
