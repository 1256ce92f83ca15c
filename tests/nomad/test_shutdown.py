"""The plugin's end with its long-lived streams open, as go-plugin ends it.

go-plugin reads every stderr line as hclog JSON and logs any other line raw in the
agent's log, so a traceback at shutdown is three lines of noise there. The race that
wrote one (grpc.aio's per-call tasks still pending when the event loop closed) lost
in one run of two to ten here, so each test stops the plugin twenty times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from _harness import PluginProcess
from _node import agent_config, launch_long_lived

from ctrexec._api.goplugin import grpc_controller_pb2
from ctrexec._api.health.v1 import health_pb2
from ctrexec._api.nomad.drivers import driver_pb2 as dpb

ROUNDS = 20
#: What go-plugin's stdio reader and Nomad's driver client take for "the plugin went away".
PLUGIN_GONE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


def _open_streams(p: PluginProcess) -> list[Any]:
    """Fingerprint, TaskEvents and health Watch, as the agent holds them; the first
    message of each that sends one at once is read, so their handlers are running."""
    fingerprints = p.driver.Fingerprint(dpb.FingerprintRequest(), timeout=120)
    events = p.driver.TaskEvents(dpb.TaskEventsRequest(), timeout=120)
    watch = p.health.Watch(health_pb2.HealthCheckRequest(service="plugin"), timeout=120)
    assert next(fingerprints).health == dpb.FingerprintResponse.HEALTHY
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    return [fingerprints, events, watch]


def _stop_by_controller(p: PluginProcess) -> int:
    return p.shutdown_and_wait()  # Shutdown, close the connection: go-plugin's Kill()


@pytest.mark.parametrize(
    "stop",
    [_stop_by_controller, PluginProcess.sigterm_and_wait],
    ids=["controller-shutdown", "sigterm"],
)
def test_stopping_with_streams_open_writes_only_hclog(
    containerd_address: str, stop: Callable[[PluginProcess], int]
) -> None:
    for round_ in range(ROUNDS):
        p = launch_long_lived(agent_config(containerd_address))
        try:
            _open_streams(p)
        finally:
            code = stop(p)
        assert code == 0, f"round {round_}: exit {code}\n{p.stderr_text()}"
        assert p.foreign_lines() == [], f"round {round_}:\n{p.stderr_text()}"
        assert p.logs[-1]["@message"] == "plugin stopped"


def test_shutdown_ends_the_open_streams(containerd_address: str) -> None:
    """With the connection kept open, each stream ends with a status the agent reads as
    the plugin going away, and the plugin exits without being killed."""
    p = launch_long_lived(agent_config(containerd_address))
    try:
        streams = _open_streams(p)
        p.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=10)
        for stream in streams:
            with pytest.raises(grpc.RpcError) as ended:
                for _ in stream:
                    pass
            assert ended.value.code() in PLUGIN_GONE, ended.value
    finally:
        code = p.wait_exit()
    assert code == 0
    assert p.foreign_lines() == [], p.stderr_text()
