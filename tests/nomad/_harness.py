"""A Nomad-like client for nomad-driver-ctrexec, over a real subprocess and real gRPC.

Closer to Nomad than Nomad's own in-process DriverHarness: it starts the binary with
the environment go-plugin gives, reads and checks the handshake line as go-plugin's
``client.go`` does, opens StreamStdio and GRPCBroker at once, kills as go-plugin does
(GRPCController.Shutdown, 2 s, SIGKILL), encodes configs as Nomad does (go-cty
msgpack from the schema the plugin returned), and lays out alloc dirs, log FIFOs and
namespaces as Nomad's client does. The facts it follows: ../shared/nomad/protocol.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import msgpack
from google.protobuf import empty_pb2

from ctrexec._api.goplugin import (
    grpc_broker_pb2,
    grpc_broker_pb2_grpc,
    grpc_controller_pb2,
    grpc_controller_pb2_grpc,
    grpc_stdio_pb2_grpc,
)
from ctrexec._api.health.v1 import health_pb2, health_pb2_grpc
from ctrexec._api.nomad.base import base_pb2_grpc
from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec._api.nomad.drivers import driver_pb2_grpc
from ctrexec._api.nomad.hclspec import hcl_spec_pb2

PLUGIN = Path(sys.executable).parent / "nomad-driver-ctrexec"
COOKIE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
#: What go-plugin adds to the agent's environment (client.go Start()).
NOMAD_ENV = {
    "NOMAD_PLUGIN_MAGIC_COOKIE": COOKIE,
    "PLUGIN_PROTOCOL_VERSIONS": "2",
    "PLUGIN_MIN_PORT": "10000",
    "PLUGIN_MAX_PORT": "25000",
}
START_TIMEOUT = 60.0  # go-plugin's default StartTimeout
KILL_GRACE = 2.0  # go-plugin's Kill(): wait this long after Shutdown, then SIGKILL


class HandshakeError(AssertionError):
    pass


def parse_handshake(line: str) -> tuple[str, str]:
    """(network, address), checked as go-plugin's client does, or HandshakeError."""
    parts = line.rstrip("\n").split("|")
    if len(parts) < 4:
        raise HandshakeError(f"Unrecognized remote plugin message: {line!r}")
    if parts[0] != "1":
        raise HandshakeError(f"incompatible core API version {parts[0]}")
    if parts[1] != "2":
        raise HandshakeError(f"unsupported app protocol {parts[1]}")
    if parts[2] not in ("unix", "tcp"):
        raise HandshakeError(f"unknown address type {parts[2]}")
    protocol = parts[4] if len(parts) > 4 else "netrpc"
    if protocol != "grpc":
        raise HandshakeError(f"unsupported plugin protocol {protocol!r}")
    if len(parts) > 5 and len(parts[5]) > 50:
        raise HandshakeError("plugin sent a server certificate we never asked for")
    if parts[2] == "unix" and not os.path.isabs(parts[3]):
        raise HandshakeError(f"unix address {parts[3]!r} is not absolute")
    return parts[2], parts[3]


def _is_hclog(line: str) -> bool:
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and {"@level", "@message", "@timestamp"} <= entry.keys()


class PluginProcess:
    """One plugin process as go-plugin runs it."""

    def __init__(self, env: Mapping[str, str] | None = None, *, dead_stderr: bool = False) -> None:
        """``dead_stderr``: stderr is a pipe with no reader, as after the agent died."""
        full = {**os.environ, **NOMAD_ENV, **(env or {})}
        read_end, write_end = os.pipe()
        self.proc = subprocess.Popen(
            [str(PLUGIN)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=write_end if dead_stderr else subprocess.PIPE,
            env=full,
        )
        os.close(write_end)
        os.close(read_end)
        self.stderr_lines: list[str] = []
        self.logs: list[dict[str, Any]] = []
        lines: queue.Queue[str] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(lines,), daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for r in self._readers:
            r.start()
        try:
            line = lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            self._finish()
            raise HandshakeError("no handshake line within the start timeout") from None
        if not line:
            self._finish()
            raise HandshakeError(f"plugin exited before the handshake: {self.stderr_text()}")
        self.network, self.address = parse_handshake(line)
        assert stat.S_ISSOCK(os.stat(self.address).st_mode), "socket not listening at handshake"
        self._connect()

    def _read_stdout(self, lines: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None
        lines.put(self.proc.stdout.readline().decode())
        for _ in self.proc.stdout:  # go-plugin drains and discards the rest
            pass

    def _finish(self) -> int:
        """Reap the process, let the readers see EOF, close the pipes."""
        code = self.proc.wait()
        for r in self._readers:
            r.join(timeout=30)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
        return code

    def _read_stderr(self) -> None:
        if self.proc.stderr is not None:
            self._read_lines(self.proc.stderr)

    def _read_lines(self, stream: Any) -> None:
        for raw in stream:
            text = raw.decode(errors="replace").rstrip("\n")
            self.stderr_lines.append(text)
            if _is_hclog(text):
                self.logs.append(json.loads(text))

    def stderr_text(self) -> str:
        return "\n".join(self.stderr_lines)

    def foreign_lines(self) -> list[str]:
        """stderr lines that go-plugin cannot parse as hclog (it logs them raw)."""
        return [line for line in self.stderr_lines if not _is_hclog(line)]

    def _connect(self) -> None:
        """As go-plugin's newGRPCClient: dial, then open StreamStdio and the broker."""
        self.channel = grpc.insecure_channel(
            f"unix:{self.address}",
            options=[
                ("grpc.max_receive_message_length", 2**31 - 1),
                ("grpc.max_send_message_length", 2**31 - 1),
            ],
        )
        self.base = base_pb2_grpc.BasePluginStub(self.channel)
        self.driver = driver_pb2_grpc.DriverStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.controller = grpc_controller_pb2_grpc.GRPCControllerStub(self.channel)
        self.stdio = grpc_stdio_pb2_grpc.GRPCStdioStub(self.channel).StreamStdio(empty_pb2.Empty())
        self.stdio_error: list[grpc.StatusCode] = []
        threading.Thread(target=self._drain_stdio, args=(self.stdio,), daemon=True).start()
        broker = grpc_broker_pb2_grpc.GRPCBrokerStub(self.channel).StartStream(
            iter([grpc_broker_pb2.ConnInfo()] * 0)
        )
        threading.Thread(target=self._ignore, args=(broker,), daemon=True).start()

    def _drain_stdio(self, call: Any) -> None:
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            self.stdio_error.append(exc.code())

    @staticmethod
    def _ignore(call: Any) -> None:
        try:
            for _ in call:
                pass
        except grpc.RpcError:
            pass  # go-plugin ignores the broker's error too

    def _remove_socket(self) -> None:
        """A SIGKILLed plugin cannot remove its socket and directory; do it for it."""
        path = Path(self.address)
        if path.name == "plugin.sock" and path.parent.name.startswith("ctrexec-nomad-"):
            path.unlink(missing_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.parent.rmdir()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def reattach(self) -> None:
        """A new connection to the same process, as after an agent crash."""
        self.channel.close()
        self._connect()

    def ping(self) -> bool:
        resp = self.health.Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=10)
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def kill(self) -> bool:
        """go-plugin's Kill: Shutdown (error ignored), wait 2 s, SIGKILL.
        True when the plugin exited by itself within the grace."""
        with contextlib.suppress(grpc.RpcError):
            self.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=KILL_GRACE)
        self.channel.close()
        try:
            self.proc.wait(timeout=KILL_GRACE)
            graceful = True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            graceful = False
        self._finish()
        self._remove_socket()
        return graceful

    def shutdown_and_wait(self, bound: float = 30.0) -> int:
        """GRPCController.Shutdown, then the exit code (bounded wait, not a timing check)."""
        self.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=10)
        return self.wait_exit(bound)

    def sigterm_and_wait(self, bound: float = 30.0) -> int:
        """SIGTERM (a person, systemd), then the exit code (a bounded wait)."""
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait_exit(bound)

    def wait_exit(self, bound: float = 30.0) -> int:
        """Close the connection; the exit code of a plugin told to stop (a bounded wait)."""
        self.channel.close()
        try:
            self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # no plugin outlives the test
            self._finish()
            self._remove_socket()
            raise
        return self._finish()

    def sigkill(self, *, remove_socket: bool = True) -> None:
        """``remove_socket=False`` leaves what the dead plugin left, as Nomad would."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self._finish()
        if remove_socket:
            self._remove_socket()
        self._await_disconnect()
        self.channel.close()  # after: calls in flight have seen the death (UNAVAILABLE)

    def _await_disconnect(self, bound: float = 30.0) -> None:
        """Until the channel has seen its connection go (bounded): the calls in flight
        fail UNAVAILABLE then. Closing it first would cancel them (CANCELLED) when the
        client's I/O thread is slow to read the reset, as on a loaded machine."""
        gone = threading.Event()

        def seen(state: grpc.ChannelConnectivity) -> None:
            if state != grpc.ChannelConnectivity.READY:
                gone.set()

        self.channel.subscribe(seen, try_to_connect=False)
        try:
            gone.wait(bound)
        finally:
            self.channel.unsubscribe(seen)
            self._await_poller()

    def _await_poller(self, bound: float = 10.0) -> None:
        """Until grpc's connectivity poller has stopped. It notices the unsubscribe only
        after its current 0.2 s watch, and a channel closed under that watch raises
        ValueError ("Channel closed!") in the poller's thread. Its state is private to
        grpc, so without it the wait is a whole watch and a margin."""
        state = getattr(self.channel, "_connectivity_state", None)
        if state is None or not hasattr(state, "polling"):
            time.sleep(0.5)
            return
        deadline = time.monotonic() + bound
        while state.polling and time.monotonic() < deadline:
            time.sleep(0.02)


# -- configs, as Nomad encodes them --------------------------------------------------

_ABSENT = object()


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _convert(value: Any, hcl_type: str) -> Any:
    if hcl_type == "number":
        return _number(value)
    if hcl_type == "list(string)":
        return [str(v) for v in value]
    if hcl_type == "map(string)":
        return {str(k): str(v) for k, v in sorted(value.items())}
    if hcl_type == "string" and not isinstance(value, str):
        return json.dumps(value) if not isinstance(value, bool) else str(value).lower()
    return value


def cty_value(spec: hcl_spec_pb2.Spec, given: Any) -> Any:
    """What hcldec + cty msgpack make of ``given`` under ``spec`` (no ``any`` types)."""
    kind = spec.WhichOneof("block")
    if kind == "object":
        given = {} if given is _ABSENT else given
        unknown = set(given) - set(spec.object.attributes)
        if unknown:
            raise ValueError(f"unsupported argument(s) {sorted(unknown)}")
        return {
            k: cty_value(spec.object.attributes[k], given.get(k, _ABSENT))
            for k in sorted(spec.object.attributes)
        }
    if kind == "Attr":
        if given is _ABSENT:
            if spec.Attr.required:
                raise ValueError(f"Missing required argument {spec.Attr.name!r}")
            return None
        return _convert(given, spec.Attr.type)
    if kind == "default":
        value = cty_value(spec.default.primary, given)
        if value is None:
            value = _number(json.loads(spec.default.default.literal.value))
        return value
    if kind == "block_value":
        return None if given is _ABSENT else cty_value(spec.block_value.nested, given)
    if kind == "block_list":
        items = [] if given is _ABSENT else given
        return [cty_value(spec.block_list.nested, g) for g in items]
    raise ValueError(f"the harness does not encode {kind} specs")


def cty_encode(spec: hcl_spec_pb2.Spec, given: Mapping[str, Any]) -> bytes:
    return msgpack.packb(cty_value(spec, dict(given)), use_bin_type=True)


# -- alloc dirs and log FIFOs, as Nomad's client lays them out ------------------------


class LogReader:
    """Stands in for logmon: reads a task's FIFO, run after run, and keeps what arrives.

    Opened non-blocking and polled, so it can be told to stop at any point: a FIFO with
    no writer yet reports nothing (Linux suppresses the hang-up until a writer came);
    once the writer (the shim) has come and gone, it opens the FIFO again for the next
    run, as logmon does across a task's restarts.
    """

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.data = bytearray()
        self._closing = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closing:
            fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                self._drain(fd)
            finally:
                os.close(fd)

    def _drain(self, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not self._closing:
            if not poller.poll(200):
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                return  # this run's writer closed: open again for the next
            self.data += chunk

    def close(self) -> None:
        """Stop reading; no thread outlives the test."""
        self._closing = True
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), f"the reader of {self.fifo} did not end"


class AllocDir:
    """``<root>/<allocID>``: alloc/{data,logs,tmp} and, per task, {local,secrets,tmp}."""

    def __init__(self, root: Path, alloc_id: str | None = None) -> None:
        self.alloc_id = alloc_id or str(uuid.uuid4())
        self.path = root / self.alloc_id
        for sub in ("alloc/data", "alloc/logs", "alloc/tmp"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        self.readers: list[LogReader] = []

    def add_task(self, name: str) -> tuple[str, str]:
        for sub in ("local", "secrets", "tmp"):
            (self.path / name / sub).mkdir(parents=True, exist_ok=True)
        paths = []
        for stream in ("stdout", "stderr"):
            fifo = self.path / "alloc" / "logs" / f".{name}.{stream}.fifo"
            if not fifo.exists():
                os.mkfifo(fifo, 0o600)
                self.readers.append(LogReader(fifo))
            paths.append(str(fifo))
        return paths[0], paths[1]

    def close(self) -> None:
        for r in self.readers:
            r.close()


def task_config(
    alloc: AllocDir,
    name: str,
    spec: hcl_spec_pb2.Spec,
    config: Mapping[str, Any],
    *,
    netns_path: str | None = None,
    env: Mapping[str, str] | None = None,
    memory_mb: int = 64,
    hosts_config: tuple[str, str] | None = None,
) -> dpb.TaskConfig:
    """The TaskConfig Nomad's task runner builds (buildTaskConfig), new id per start.

    With ``netns_path``, the network isolation spec a real agent sends a driver that
    does not create the network: GROUP, the path, empty labels and no hostsConfig
    (Nomad's network hook fills that only from the docker driver's sandbox labels).
    ``hosts_config`` (hostname, address) sends one anyway, as a driver that creates
    the network would get it.
    """
    stdout, stderr = alloc.add_task(name)
    task_env = {
        "NOMAD_ALLOC_DIR": "/alloc",
        "NOMAD_TASK_DIR": "/local",
        "NOMAD_SECRETS_DIR": "/secrets",
        "NOMAD_ALLOC_ID": alloc.alloc_id,
        "NOMAD_TASK_NAME": name,
        **(env or {}),
    }
    tc = dpb.TaskConfig(
        id=f"{alloc.alloc_id}/{name}/{uuid.uuid4().hex[:8]}",
        name=name,
        msgpack_driver_config=cty_encode(spec, config),
        env=task_env,
        alloc_dir=str(alloc.path),
        stdout_path=stdout,
        stderr_path=stderr,
        task_group_name="web",
        job_name="example",
        job_id="example",
        namespace="default",
        alloc_id=alloc.alloc_id,
    )
    tc.resources.allocated_resources.cpu.cpu_shares = 100
    tc.resources.allocated_resources.memory.memory_mb = memory_mb
    tc.resources.linux_resources.cpu_shares = 100
    tc.resources.linux_resources.memory_limit_bytes = memory_mb * 1024 * 1024
    if netns_path is not None:
        tc.network_isolation_spec.mode = dpb.NetworkIsolationSpec.GROUP
        tc.network_isolation_spec.path = netns_path
        if hosts_config is not None:
            hostname, address = hosts_config
            tc.network_isolation_spec.hostsConfig.hostname = hostname
            tc.network_isolation_spec.hostsConfig.address = address
    return tc


def check_start_response(resp: dpb.StartTaskResponse) -> None:
    """What Nomad's client needs from StartTask (nil handle.config skips recovery)."""
    assert resp.HasField("handle") and resp.handle.HasField("config")
    assert resp.handle.version >= 1
    assert resp.handle.driver_state


def check_inspect_response(resp: dpb.InspectTaskResponse) -> None:
    """The Go conversion fails on a nil started_at/completed_at and derefs result."""
    assert resp.task.HasField("started_at")
    assert resp.task.HasField("completed_at")
    assert resp.task.HasField("result")
