"""The Nomad row: the harness's StartTask-to-running for a 1-task group, against ``ctr``.

The plugin is ``nomad-driver-ctrexec``, spawned and driven as go-plugin and Nomad's
client do by the test harness (``tests/nomad/_harness.py``): handshake, SetConfig with
the agent config, Init, then one StartTask per round into a namespace made as Nomad
makes it (a file under /run/netns), with the alloc dir and logmon-like FIFO readers.
StartTask returns once the task runs, so its wall time is the row.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "nomad"))

from _harness import AllocDir, PluginProcess, cty_encode, task_config  # noqa: E402

from ctrexec._api.nomad.base import base_pb2  # noqa: E402
from ctrexec._api.nomad.drivers import driver_pb2 as dpb  # noqa: E402
from ctrexec.net import netns  # noqa: E402

SLEEP_TASK = {"command": "sleep", "args": ["600"]}


class NomadPeer:
    """One long-lived plugin for the scenario; each round one allocation of one task."""

    def __init__(self, address: str, namespace: str, image: str, work: Path) -> None:
        self.image = image
        self.work = work
        self.plugin = PluginProcess()
        schema = self.plugin.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        nomad = base_pb2.NomadConfig()
        self.plugin.base.SetConfig(
            base_pb2.SetConfigRequest(
                msgpack_config=cty_encode(schema, {"address": address, "namespace": namespace}),
                nomad_config=nomad,
                plugin_api_version="v0.1.0",
            ),
            timeout=30,
        )
        self.plugin.driver.Init(dpb.InitRequest(), timeout=30)
        spec = dpb.TaskConfigSchemaRequest()
        self.task_spec = self.plugin.driver.TaskConfigSchema(spec, timeout=10).spec
        self.allocs: list[AllocDir] = []
        self.tasks: list[str] = []

    def group(self, name: str) -> None:
        """Timed: the allocation's namespace (as Nomad makes it), then StartTask."""
        ns = netns.create(name)
        alloc = AllocDir(self.work, str(uuid.uuid4()))
        self.allocs.append(alloc)
        config: dict[str, Any] = {"image": self.image, **SLEEP_TASK}
        tc = task_config(alloc, "web", self.task_spec, config, netns_path=ns.path)
        self.tasks.append(tc.id)
        resp = self.plugin.driver.StartTask(dpb.StartTaskRequest(task=tc), timeout=60)
        assert resp.result == dpb.StartTaskResponse.SUCCESS, resp

    def cleanup(self) -> None:
        """Every round's task through DestroyTask, then the FIFO readers."""
        for task_id in self.tasks:
            self.plugin.driver.DestroyTask(
                dpb.DestroyTaskRequest(task_id=task_id, force=True), timeout=60
            )
        self.tasks.clear()
        for alloc in self.allocs:
            alloc.close()
        self.allocs.clear()

    def close(self) -> None:
        self.cleanup()
        self.plugin.kill()
