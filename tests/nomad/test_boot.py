"""The plugin process as Nomad's agent sees it at boot: cookie, handshake, the three
launches (probe, validate, long-lived), go-plugin's side services and kills."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import msgpack
import pytest
from _harness import PLUGIN, HandshakeError, PluginProcess, cty_encode, parse_handshake
from _node import agent_config, nomad_config

from ctrexec._api.nomad.base import base_pb2
from ctrexec._api.nomad.drivers import driver_pb2 as dpb


def test_refuses_to_run_without_the_cookie() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NOMAD_PLUGIN_MAGIC_COOKIE"}
    done = subprocess.run(
        [str(PLUGIN)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert done.stdout == ""  # no handshake
    assert done.stderr.count("\n") == 1
    assert "Nomad task driver plugin" in done.stderr


def test_handshake_parser_is_go_plugins() -> None:
    assert parse_handshake("1|2|unix|/tmp/p.sock|grpc\n") == ("unix", "/tmp/p.sock")
    assert parse_handshake("1|2|unix|/tmp/p.sock|grpc|") == ("unix", "/tmp/p.sock")
    for bad in (
        "1|2|unix",
        "2|2|unix|/a|grpc",
        "1|1|unix|/a|grpc",
        "1|2|unix|/a",
        "1|2|udp|/a|grpc",
    ):
        with pytest.raises(HandshakeError):
            parse_handshake(bad)


def test_probe_launch(containerd_address: str) -> None:
    """Process #1: PluginInfo, ConfigSchema, kill."""
    p = PluginProcess()
    try:
        info = p.base.PluginInfo(base_pb2.PluginInfoRequest(), timeout=10)
        assert info.type == base_pb2.DRIVER
        assert "v0.1.0" in info.plugin_api_versions
        assert info.name == "ctrexec"
        assert all(part.isdigit() for part in info.plugin_version.split("-")[0].split("."))
        schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        assert schema.WhichOneof("block") == "object"
        assert p.ping()
        assert p.stdio_error == []  # StreamStdio is held open, not refused
    finally:
        assert p.shutdown_and_wait() == 0
    assert not Path(p.address).exists()
    assert p.logs and all("@level" in e for e in p.logs)


def test_validate_launch_does_not_need_containerd() -> None:
    """Process #2: SetConfig twice with no NomadConfig, kill. Nothing connects yet."""
    p = PluginProcess()
    try:
        schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        payload = cty_encode(schema, {"address": "/nonexistent/containerd.sock"})
        for _ in range(2):
            p.base.SetConfig(
                base_pb2.SetConfigRequest(msgpack_config=payload, plugin_api_version="v0.1.0"),
                timeout=10,
            )
    finally:
        assert p.shutdown_and_wait() == 0


def test_bad_agent_config_is_refused_with_its_key() -> None:
    p = PluginProcess()
    try:
        schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        bad = cty_value_with(schema, stats_interval="soon")
        with pytest.raises(grpc.RpcError) as err:
            p.base.SetConfig(base_pb2.SetConfigRequest(msgpack_config=bad), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "stats_interval" in (err.value.details() or "")
    finally:
        p.kill()


def cty_value_with(schema: Any, **values: Any) -> bytes:
    return cty_encode(schema, values)


def test_long_lived_instance(containerd_address: str, nomad_client: Any) -> None:
    """Process #3: SetConfig with NomadConfig, Init (twice: it is idempotent), then the
    Fingerprint and TaskEvents streams: the first fingerprint at once, both stay open."""
    p = PluginProcess()
    try:
        schema = p.base.ConfigSchema(base_pb2.ConfigSchemaRequest(), timeout=10).spec
        p.base.SetConfig(
            base_pb2.SetConfigRequest(
                msgpack_config=cty_encode(schema, agent_config(containerd_address)),
                nomad_config=nomad_config(),
                plugin_api_version="v0.1.0",
            ),
            timeout=30,
        )
        p.driver.Init(dpb.InitRequest(), timeout=30)
        p.driver.Init(dpb.InitRequest(), timeout=30)
        fingerprints = p.driver.Fingerprint(dpb.FingerprintRequest(), timeout=120)
        events = p.driver.TaskEvents(dpb.TaskEventsRequest(), timeout=120)
        first = next(fingerprints)
        assert first.health == dpb.FingerprintResponse.HEALTHY, first.health_description
        assert first.attributes["driver.ctrexec.containerd.version"].string_val
        assert "driver.ctrexec.version" in first.attributes
        caps = p.driver.Capabilities(dpb.CapabilitiesRequest(), timeout=10).capabilities
        assert list(caps.network_isolation_modes) == [
            dpb.NetworkIsolationSpec.HOST,
            dpb.NetworkIsolationSpec.GROUP,
        ]
        assert not caps.must_create_network
        assert caps.fs_isolation == dpb.DriverCapabilities.IMAGE
        assert caps.send_signals and caps.exec
        # A later call got its answer while both streams are still running.
        assert fingerprints.is_active() and events.is_active()
        # A reattach (agent crash): a new connection, no SetConfig, Init again.
        p.reattach()
        p.driver.Init(dpb.InitRequest(), timeout=30)
        assert p.ping()
    finally:
        assert p.shutdown_and_wait() == 0


def test_survives_sigint_and_a_dead_agent_stderr() -> None:
    """SIGINT (the agent's process group) is ignored; with stderr's reader gone the
    plugin still serves (it logs to a broken pipe without dying)."""
    p = PluginProcess(dead_stderr=True)  # EPIPE on every log line
    try:
        os.kill(p.proc.pid, signal.SIGINT)
        assert p.ping()
        for _ in range(3):
            p.base.SetConfig(
                base_pb2.SetConfigRequest(msgpack_config=msgpack.packb({})), timeout=10
            )
        assert p.ping()
    finally:
        p.kill()
    assert p.proc.returncode == 0


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR short enough for a unix socket path (108 bytes) under it."""
    with tempfile.TemporaryDirectory(prefix="cxn-", dir="/tmp") as where:
        yield Path(where)


def test_a_sigkilled_plugins_socket_dir_is_swept_by_the_next_one(short_tmp: Path) -> None:
    """SIGKILL leaves the socket and its directory; the next plugin to start removes
    them (its own, and any other live plugin's, stay)."""
    env = {"TMPDIR": str(short_tmp)}
    first = PluginProcess(env)
    stale = Path(first.address).parent
    first.sigkill(remove_socket=False)
    assert stale.exists(), "a SIGKILLed plugin cannot remove its directory"
    past = time.time() - 60  # older than the sweep's grace for a plugin still starting
    os.utime(stale, (past, past))
    live = PluginProcess(env)
    try:
        second = PluginProcess(env)
        try:
            assert not stale.exists()
            assert Path(live.address).exists() and Path(second.address).exists()
        finally:
            second.kill()
    finally:
        live.kill()
    assert list(short_tmp.iterdir()) == []
