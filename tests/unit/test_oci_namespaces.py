"""Namespaces replace by type; hostname and sysctls are checked against them."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    build_spec,
    find_namespace,
    with_host_namespace,
    with_host_network,
    with_hostname,
    with_namespace,
    with_network_namespace,
    with_sysctls,
)

pytestmark = pytest.mark.unit


def _namespaces(spec: dict[str, Any]) -> list[dict[str, Any]]:
    namespaces: list[dict[str, Any]] = spec["linux"]["namespaces"]
    return namespaces


def test_network_namespace_path_replaces_entry() -> None:
    spec = build_spec(with_network_namespace("/run/netns/group-a"))
    network = [n for n in _namespaces(spec) if n["type"] == "network"]
    assert network == [{"type": "network", "path": "/run/netns/group-a"}]
    # Position is kept, so runc's join order does not change.
    assert [n["type"] for n in _namespaces(spec)] == [
        "pid", "ipc", "uts", "mount", "network", "cgroup"
    ]  # fmt: skip


def test_applying_a_namespace_twice_yields_one_entry() -> None:
    once = build_spec(with_network_namespace("/run/netns/a"))
    twice = build_spec(
        with_network_namespace("/run/netns/a"), with_network_namespace("/run/netns/a")
    )
    assert once == twice
    last = build_spec(
        with_network_namespace("/run/netns/a"), with_network_namespace("/run/netns/b")
    )
    assert find_namespace(last, "network") == {"type": "network", "path": "/run/netns/b"}
    assert sum(n["type"] == "network" for n in _namespaces(last)) == 1


def test_with_namespace_collapses_duplicates_and_appends_new_types() -> None:
    base = build_spec()
    base["linux"]["namespaces"].append({"type": "network", "path": "/stale"})
    spec = with_namespace("network")(base)
    assert [n for n in _namespaces(spec) if n["type"] == "network"] == [{"type": "network"}]
    user = build_spec(with_namespace("user"), with_namespace("user"))
    assert [n["type"] for n in _namespaces(user)].count("user") == 1
    assert _namespaces(user)[-1] == {"type": "user"}


@pytest.mark.parametrize(
    ("ns_type", "path"), [("net", None), ("bogus", None), ("pid", "rel/path"), ("ipc", "/a/../b")]
)
def test_with_namespace_rejects(ns_type: str, path: str | None) -> None:
    with pytest.raises(InvalidArgument):
        with_namespace(ns_type, path)


def test_host_network_removes_entry() -> None:
    spec = build_spec(with_network_namespace("/run/netns/a"), with_host_network())
    assert find_namespace(spec, "network") is None
    assert "network" not in [n["type"] for n in _namespaces(spec)]
    assert build_spec(with_host_network(), with_host_network()) == build_spec(with_host_network())


def test_host_namespace() -> None:
    spec = build_spec(with_host_namespace("ipc"))
    assert find_namespace(spec, "ipc") is None
    assert find_namespace(spec, "pid") == {"type": "pid"}
    with pytest.raises(InvalidArgument):
        with_host_namespace("nope")


def test_hostname() -> None:
    assert build_spec(with_hostname("web-1.example"))["hostname"] == "web-1.example"


@pytest.mark.parametrize("bad", ["", "-web", "web-", "a" * 65, "under_score", "sp ace", "a..b"])
def test_hostname_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        with_hostname(bad)


def test_hostname_needs_uts_namespace() -> None:
    spec = build_spec(with_hostname("a"))
    with pytest.raises(InvalidArgument, match="UTS"):
        with_host_namespace("uts")(spec)
    no_uts = build_spec(with_hostname("a"))
    del no_uts["hostname"]
    no_uts = with_host_namespace("uts")(no_uts)
    with pytest.raises(InvalidArgument, match="UTS"):
        with_hostname("b")(no_uts)


def test_sysctls() -> None:
    spec = build_spec(
        with_sysctls({"net.ipv4.ip_forward": "1"}),
        with_sysctls({"net.core.somaxconn": "1024", "net.ipv4.ip_forward": "0"}),
    )
    assert spec["linux"]["sysctl"] == {"net.ipv4.ip_forward": "0", "net.core.somaxconn": "1024"}


@pytest.mark.parametrize(
    "key",
    [
        "kernel.shmmax",
        "vm.swappiness",
        "fs.file-max",
        "net",
        "net/ipv4/ip_forward",
        "net.ipv4..ip_forward",
        "net.ipv4.conf.../x",
        "net.ipv4.conf.eth0/1.forwarding",
        "",
        "net.ipv4.ip forward",
    ],
)
def test_sysctls_refuse_unnamespaced_or_malformed_keys(key: str) -> None:
    with pytest.raises(InvalidArgument):
        with_sysctls({key: "1"})


def test_sysctls_refuse_bad_values() -> None:
    for value in ("1\n2", 1, "\x00"):
        with pytest.raises(InvalidArgument):
            with_sysctls({"net.core.somaxconn": value})  # type: ignore[dict-item]


def test_net_sysctls_refused_with_host_network_in_either_order() -> None:
    with pytest.raises(InvalidArgument, match="host's network"):
        build_spec(with_host_network(), with_sysctls({"net.ipv4.ip_forward": "1"}))
    with pytest.raises(InvalidArgument, match="host's network"):
        build_spec(with_sysctls({"net.ipv4.ip_forward": "1"}), with_host_network())
