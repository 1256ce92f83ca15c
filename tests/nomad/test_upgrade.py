"""Upgrades: a task started by an earlier release is recovered by this one from the
handle Nomad kept (the released bytes in tests/data/nomad-driver-state-v1.json), and a
handle of a version this plugin does not know is refused in one line, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from _harness import AllocDir, check_inspect_response, check_start_response, task_config
from _node import NOMAD_NAMESPACE, Node

from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.testing import wait_for

IMAGE = "docker.io/library/ctrexec-test:latest"
V1 = json.loads((Path(__file__).parent.parent / "data" / "nomad-driver-state-v1.json").read_text())
SCRIPT = "while [ ! -e /alloc/go ]; do sleep 0.1; done; exit 5"


def _handle_as_released(node: Node, alloc: AllocDir) -> dpb.TaskHandle:
    """Start the fixture's task id (so its container id is the fixture's) and give back
    the handle Nomad would hold: its config, with the released driver_state bytes."""
    tc = task_config(
        alloc, "web", node.task_spec, {"image": IMAGE, "command": "sh", "args": ["-c", SCRIPT]}
    )
    tc.id = V1["task_id"]
    resp = node.start(tc)
    check_start_response(resp)
    raw = V1["driver_state"].replace('"ctrexec-test-nomad"', json.dumps(NOMAD_NAMESPACE))
    handle = dpb.TaskHandle()
    handle.CopyFrom(resp.handle)
    handle.driver_state = raw.encode()
    return handle


def _state(node: Node, task_id: str) -> dpb.InspectTaskResponse:
    resp = node.plugin.driver.InspectTask(dpb.InspectTaskRequest(task_id=task_id), timeout=10)
    check_inspect_response(resp)
    return resp


def test_a_v1_handle_recovers_a_running_task(node: Node, alloc: AllocDir) -> None:
    handle = _handle_as_released(node, alloc)
    tid = handle.config.id
    wait_for(lambda: _state(node, tid).task.state == dpb.RUNNING, timeout=30, what="running")
    node.plugin.sigkill()  # the old release goes away; the task stays with its shim
    node.plugin = node.launch()
    node.plugin.driver.RecoverTask(dpb.RecoverTaskRequest(handle=handle), timeout=30)
    resp = _state(node, tid)
    assert resp.task.state == dpb.RUNNING
    assert resp.task.started_at.ToJsonString() == "2026-12-05T06:15:02.123456Z"
    (alloc.path / "alloc" / "go").write_text("")
    assert node.wait(tid, timeout=120).exit_code == 5


@pytest.mark.parametrize("version", [99, "2"])
def test_an_unknown_handle_version_is_refused_in_one_line(
    node: Node, alloc: AllocDir, version: object
) -> None:
    handle = _handle_as_released(node, alloc)
    raw = json.loads(handle.driver_state)
    raw["version"] = version
    node.plugin.sigkill()
    node.plugin = node.launch()
    handle.driver_state = json.dumps(raw).encode()
    with pytest.raises(grpc.RpcError) as caught:
        node.plugin.driver.RecoverTask(dpb.RecoverTaskRequest(handle=handle), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    text = caught.value.details()
    assert f"driver_state version {version!r} is unknown" in text and "\n" not in text
    assert node.plugin.ping()  # still serving
    with pytest.raises(grpc.RpcError):  # not adopted
        _state(node, handle.config.id)
    assert not node.plugin.foreign_lines(), node.plugin.stderr_text()
