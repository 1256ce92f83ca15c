"""Proof that namespace work is fork-free while gRPC is busy in the same process.

gRPC supports fork only before any channel exists; pyroute2's netns helpers fork.
Here an in-process gRPC server and four client threads keep calls in flight while
four other threads run 100 create/inspect/netlink/remove cycles (and some CNI
plugin execs). The test fails if anything hangs (a bounded join, not a timing
assertion), if Python's at-fork hooks fire even once, if gRPC logs anything about
fork, if a thread is left in another namespace, or if a namespace is left behind.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ctrexec.net import cni, netns, nsinfo

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
]

CYCLES = 100
WORKERS = 4
CALLERS = 4
JOIN_TIMEOUT = 300.0
METHOD = "/cxt.Echo/Ping"
TAG = f"cxt-fork{os.getpid()}-{uuid.uuid4().hex[:4]}"

_forks = {"armed": False, "count": 0}


def _before_fork() -> None:
    if _forks["armed"]:
        _forks["count"] += 1


os.register_at_fork(before=_before_fork)


def _echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


@pytest.fixture
def grpc_channel(tmp_path: Path) -> Iterator[grpc.Channel]:
    address = f"unix://{tmp_path}/echo.sock"
    server = grpc.server(thread_pool=_executor())
    handler = grpc.unary_unary_rpc_method_handler(
        _echo, request_deserializer=None, response_serializer=None
    )
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("cxt.Echo", {"Ping": handler})]
    )
    server.add_insecure_port(address)
    server.start()
    channel = grpc.insecure_channel(address)
    try:
        yield channel
    finally:
        channel.close()
        server.stop(grace=None).wait()


def _executor() -> object:
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=8)


def _host_netns_everywhere() -> bool:
    host = Path("/proc/self/ns/net").stat()
    for task in Path("/proc/self/task").iterdir():
        try:
            st = (task / "ns" / "net").stat()
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) != (host.st_dev, host.st_ino):
            return False
    return True


def test_netns_cycles_beside_live_grpc(
    grpc_channel: grpc.Channel, capfd: pytest.CaptureFixture[str]
) -> None:
    ping = grpc_channel.unary_unary(METHOD)
    assert ping(b"warm-up", timeout=10) == b"warm-up"

    stop = threading.Event()
    calls = [0] * CALLERS
    failures: list[BaseException] = []

    def caller(i: int) -> None:
        while not stop.is_set():
            try:
                assert ping(b"x" * 64, timeout=10) == b"x" * 64
                calls[i] += 1
            except BaseException as exc:
                failures.append(exc)
                return

    plugins = Path("/usr/lib/cni/bridge").exists()
    done = [0] * WORKERS

    def worker(w: int) -> None:
        for n in range(CYCLES // WORKERS):
            if stop.is_set():
                return
            name = f"{TAG}-{w}-{n}"
            try:
                ns = netns.create(name)
                try:
                    info = nsinfo.inspect(ns.path)
                    assert info.interface("lo") is not None
                    with netns.netlink(ns.path) as ipr:
                        ipr.link("add", ifname="cxtv0", kind="veth", peer="cxtv1")
                    assert nsinfo.inspect(ns.path).interface("cxtv1") is not None
                    if plugins and n % 5 == 0:  # vfork+exec of a CNI plugin
                        runtime = cni.CNI(plugin_dirs=["/usr/lib/cni"])
                        assert "1.0.0" in runtime.plugin_versions("bridge")
                finally:
                    netns.remove(ns.path)
                done[w] += 1
            except BaseException as exc:
                failures.append(exc)
                return

    _forks["armed"] = True
    callers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(CALLERS)]
    workers = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(WORKERS)]
    try:
        for t in callers + workers:
            t.start()
        for t in workers:
            t.join(JOIN_TIMEOUT)
        hung = [t.name for t in workers if t.is_alive()]
    finally:
        stop.set()
        for t in callers:
            t.join(30)
        _forks["armed"] = False

    assert not hung, f"namespace workers deadlocked: {hung}"
    assert not [t.name for t in callers if t.is_alive()], "gRPC callers deadlocked"
    assert not failures, failures[:3]
    assert sum(done) == CYCLES
    assert all(calls), f"every caller completed calls during the run: {calls}"
    assert _forks["count"] == 0, "something forked while gRPC was live"
    _, err = capfd.readouterr()
    assert "fork" not in err.lower(), err[-2000:]
    assert _host_netns_everywhere()
    assert [p.name for p in Path("/run/netns").glob(f"{TAG}*")] == []
