"""Result parsing for every supported cniVersion, error parsing, cache keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctrexec.errors import CNIError, InvalidArgument, NetworkError
from ctrexec.net import cni

pytestmark = pytest.mark.unit

NETNS = "/run/netns/cxt-r"


def result(version: str, *, with_ip_version: bool) -> dict[str, Any]:
    ip4: dict[str, Any] = {"address": "10.231.3.2/24", "gateway": "10.231.3.1", "interface": 2}
    ip6: dict[str, Any] = {"address": "fd00:231::2/64", "interface": 2}
    if with_ip_version:
        ip4["version"] = "4"
        ip6["version"] = "6"
    return {
        "cniVersion": version,
        "interfaces": [
            {"name": "cxtbr3", "mac": "aa:bb:cc:dd:ee:01"},
            {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:02"},
            {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": NETNS},
        ],
        "ips": [ip4, ip6],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.99.0.0/16", "gw": "10.231.3.254"}],
        "dns": {"nameservers": ["10.231.3.1"], "domain": "cxt", "search": ["a"], "options": []},
    }


@pytest.mark.parametrize(
    ("version", "with_ip_version"),
    [("0.3.0", True), ("0.3.1", True), ("0.4.0", True), ("1.0.0", False)],
)
def test_parse_result_each_version(version: str, with_ip_version: bool) -> None:
    data = result(version, with_ip_version=with_ip_version)
    res = cni.parse_result(data)
    assert res.cni_version == version
    assert [i.name for i in res.interfaces] == ["cxtbr3", "veth1234", "eth0"]
    assert res.interfaces[0].sandbox is None
    assert res.interfaces[2].sandbox == NETNS
    assert [(i.address, i.version) for i in res.ips] == [
        ("10.231.3.2/24", 4),
        ("fd00:231::2/64", 6),
    ]
    assert res.ips[0].ip == "10.231.3.2"
    assert res.ips[0].prefixlen == 24
    assert res.ips[0].gateway == "10.231.3.1"
    assert res.ips[1].gateway is None
    assert res.routes == (cni.CNIRoute("0.0.0.0/0"), cni.CNIRoute("10.99.0.0/16", "10.231.3.254"))
    assert res.dns == cni.CNIDNS(("10.231.3.1",), "cxt", ("a",), ())
    assert res.container_ips("eth0") == res.ips
    assert res.container_ips("eth1") == ()
    assert res.to_json() == data


def test_parse_minimal_result_and_default_version() -> None:
    res = cni.parse_result({"ips": [{"address": "10.231.3.2/24"}]}, default_version="1.0.0")
    assert res.interfaces == ()
    assert res.container_ips() == ()  # no interface index: not known to be in a sandbox
    assert res.dns == cni.CNIDNS()


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"cniVersion": "0.2.0"},
        {"cniVersion": "1.0.0", "interfaces": [{"mac": "x"}]},
        {"cniVersion": "1.0.0", "ips": [{"gateway": "10.0.0.1"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.231.0.300/24"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.231.0.3/24", "gateway": "x"}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.231.0.3/24", "interface": 0}]},
        {"cniVersion": "1.0.0", "ips": [{"address": "10.231.0.3/24", "interface": True}]},
        {"cniVersion": "0.4.0", "ips": [{"address": "10.231.0.3/24", "version": "6"}]},
        {"cniVersion": "1.0.0", "routes": [{"gw": "10.0.0.1"}]},
        {"cniVersion": "1.0.0", "dns": []},
        {"cniVersion": "1.0.0", "ips": {}},
        {"cniVersion": "1.0.0", "interfaces": "eth0"},
        {"cniVersion": "1.0.0", "dns": {"nameservers": "10.0.0.1"}},
    ],
)
def test_malformed_results(data: Any) -> None:
    with pytest.raises(NetworkError, match="malformed CNI result"):
        cni.parse_result(data)


def test_parse_error_json() -> None:
    out = json.dumps(
        {"cniVersion": "1.0.0", "code": 7, "msg": "bad config", "details": "no bridge"}
    ).encode()
    err = cni.parse_error(out, b"noise", 1, plugin="bridge ADD")
    assert isinstance(err, CNIError)
    assert err.code == 7
    assert err.details == "no bridge"
    assert "bridge ADD" in str(err)
    assert "bad config" in str(err)
    assert "invalid network config" in str(err)


def test_parse_error_plugin_specific_code() -> None:
    err = cni.parse_error(b'{"code": 999, "msg": "chain missing"}', b"", 1, plugin="portmap")
    assert err.code == 999
    assert "chain missing" in str(err)


def test_parse_error_without_json_uses_stderr_tail() -> None:
    err = cni.parse_error(b"", b"x" * 5000 + b"panic: the end", 2, plugin="p ADD")
    assert err.code == 0
    assert "status 2" in str(err)
    assert str(err).endswith("panic: the end")
    assert len(err.details) <= 2000
    empty = cni.parse_error(b"not json", b"", 1, plugin="p DEL")
    assert "(no output)" in str(empty)


def test_cache_path_is_unambiguous(tmp_path: Path) -> None:
    runtime = cni.CNI(cache_dir=tmp_path, plugin_dirs=[tmp_path], conf_dir=tmp_path)
    a = runtime.cache_path("a-b", "c", "eth0")
    b = runtime.cache_path("a", "b-c", "eth0")
    assert a != b
    assert a == tmp_path / "a-b+c+eth0.json"
    assert a.parent == tmp_path


@pytest.mark.parametrize(
    ("network", "cid", "ifname"),
    [
        ("a/b", "c", "eth0"),
        ("a", "../c", "eth0"),
        ("a", "c", "eth0/x"),
        ("a", "c", "x" * 16),
        ("a+b", "c", "eth0"),
        ("a", "", "eth0"),
    ],
)
def test_cache_path_rejects(tmp_path: Path, network: str, cid: str, ifname: str) -> None:
    runtime = cni.CNI(cache_dir=tmp_path, plugin_dirs=[tmp_path], conf_dir=tmp_path)
    with pytest.raises(InvalidArgument):
        runtime.cache_path(network, cid, ifname)


def test_default_dirs_live_under_run() -> None:
    assert cni.DEFAULT_CACHE_DIR.startswith("/run/")
    assert cni.DEFAULT_IPAM_DIR.startswith("/run/")
    assert cni.DEFAULT_PLUGIN_DIRS == ("/opt/cni/bin", "/usr/lib/cni")
