"""What Nomad's client keeps of the plugin: the agent config and the long-lived instance.

A module of its own, not conftest: test files import these, and ``conftest`` as a
module name is shared by every folder's conftest, so which one an import finds would
depend on which tests a run selects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _cli import TEST_NAMESPACE
from _harness import PluginProcess, cty_encode

from ctrexec._api.nomad.base import base_pb2
from ctrexec._api.nomad.drivers import driver_pb2 as dpb

NOMAD_NAMESPACE = f"{TEST_NAMESPACE}-nomad"


def agent_config(containerd_address: str, **extra: Any) -> dict[str, Any]:
    """The agent file's ``plugin "nomad-driver-ctrexec" { config { ... } }`` block."""
    return {"address": containerd_address, "namespace": NOMAD_NAMESPACE, **extra}


#: The node's CPU as the harness's agent describes it (Nomad 1.7+ sends its detected
#: topology to every driver): cores at this base speed; TaskStats' total_ticks use it.
CORES, CORE_MHZ = 2, 2000


def nomad_config() -> base_pb2.NomadConfig:
    cfg = base_pb2.NomadConfig()
    cfg.driver.ClientMinPort = 14000
    cfg.driver.ClientMaxPort = 14512
    cfg.driver.Topology.node_ids.append(0)
    for core in range(CORES):
        cfg.driver.Topology.cores.add(core_id=core, base_speed=CORE_MHZ, guess_speed=CORE_MHZ)
    return cfg


def launch_long_lived(config: dict[str, Any]) -> PluginProcess:
    """Process #3 of the boot sequence: SetConfig with a NomadConfig, then Init."""
    p = PluginProcess()
    schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
    p.base.SetConfig(
        base_pb2.SetConfigRequest(
            msgpack_config=cty_encode(schema, config),
            nomad_config=nomad_config(),
            plugin_api_version="v0.1.0",
        ),
        timeout=30,
    )
    p.driver.Init(dpb.InitRequest(), timeout=30)
    return p


class Node:
    """The long-lived plugin instance and what Nomad's client keeps of it."""

    def __init__(self, address: str, config: dict[str, Any]) -> None:
        self.address = address
        self.config = config
        self.plugin = self.launch()
        self.started: list[str] = []

    def launch(self) -> PluginProcess:
        p = launch_long_lived(self.config)
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
