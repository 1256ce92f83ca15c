"""``run``'s docker flags read without a daemon: -p's forms, --network, --restart."""

from __future__ import annotations

import argparse
import socket
from typing import Any

import pytest

from ctrexec import InvalidArgument, NetworkRequest, TaskConfig
from ctrexec.cli.publish import restart_policy
from ctrexec.net.ports import expand_publish, free_host_port


def _pick(host_ip: str, proto: str) -> int:
    return 40000 if proto == "tcp" else 40001


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8080:80", ["8080:80"]),
        ("127.0.0.1:8080:80/udp", ["127.0.0.1:8080:80/udp"]),
        ("80", ["40000:80"]),
        ("80/udp", ["40001:80/udp"]),
        ("127.0.0.1::80", ["127.0.0.1:40000:80"]),
        ("[::1]::80", ["[::1]:40000:80"]),
        ("8000-8002:80-82/tcp", ["8000:80/tcp", "8001:81/tcp", "8002:82/tcp"]),
        ("1:2:3:4", ["1:2:3:4"]),  # left for parse_port to refuse
    ],
)
def test_expand_publish(text: str, expected: list[str]) -> None:
    assert expand_publish(text, _pick) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("8000-8001:80", "the host and container ranges differ in size"),
        ("90-80:90-80", "ends before it starts"),
        ("0:80", "ports must be 1..65535"),
        ("x:80", "ports must be 1..65535"),
    ],
)
def test_expand_publish_refuses(text: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        expand_publish(text, _pick)


def test_a_range_without_host_ports_gets_different_ones() -> None:
    ports = iter([40005, 40005, 40007])
    assert expand_publish("81-82", lambda _ip, _proto: next(ports)) == ["40005:81", "40007:82"]
    with pytest.raises(InvalidArgument, match="cannot pick 2 free host ports"):
        expand_publish("81-82", lambda _ip, _proto: 40005)


def test_a_picked_port_is_free_to_bind() -> None:
    port = free_host_port("127.0.0.1", "tcp")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no", ("no", 0)),
        ("always", ("always", 0)),
        ("unless-stopped", ("unless-stopped", 0)),
        ("on-failure", ("on-failure", 0)),
        ("on-failure:5", ("on-failure", 5)),
    ],
)
def test_restart_policy(text: str, expected: tuple[str, int]) -> None:
    assert restart_policy(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sometimes", "invalid restart policy"),
        ("always:2", "maximum retry count cannot be used with restart policy 'always'"),
        ("on-failure:-1", "invalid maximum retry count"),
        ("on-failure:", "invalid maximum retry count"),
    ],
)
def test_restart_policy_refuses(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        restart_policy(text)


def test_a_network_request_keeps_its_forms_and_binds_nothing() -> None:
    request = NetworkRequest(ports=["80", "8000-8001:80-81/udp"], publish_all=True)
    assert (request.mode, request.ports) == ("bridge", ("80", "8000-8001:80-81/udp"))
    assert NetworkRequest(mode="cni:mynet").ports == ()
    config = TaskConfig(name="web", image="busybox")
    request.check(config)  # the default netns ("none") and no group: nothing to refuse


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"mode": "none", "ports": ["80:80"]}, "--publish needs --network bridge or cni:NAME"),
        ({"mode": "host", "ports": ["80:80"]}, "--publish needs --network bridge or cni:NAME"),
        ({"mode": "host", "publish_all": True}, "--publish needs --network bridge or cni:NAME"),
        ({"mode": "host"}, "makes no namespace: set TaskConfig.netns"),
        ({"mode": "overlay"}, "invalid network mode 'overlay'"),
        ({"ports": ["80:80:80:80"]}, "invalid port mapping"),
        ({"ports": ["8000-8001:80"]}, "the host and container ranges differ in size"),
        ({"ports": "80:80"}, "ports must be a sequence of port mappings"),
    ],
)
def test_a_network_request_refuses(fields: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        NetworkRequest(**fields)


@pytest.mark.parametrize(
    ("placed", "why"),
    [
        ({"netns": "web"}, "--netns cannot be used with --network or --publish"),
        ({"netns": "host"}, "--netns cannot be used with --network or --publish"),
        ({"group": "g"}, "--group cannot be used with --network or --publish"),
    ],
)
def test_a_network_request_refuses_a_placed_config(placed: dict[str, str], why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        NetworkRequest().check(TaskConfig(name="web", image="busybox", **placed))
