"""Conflist loading/validation, CNI_ARGS, per-plugin stdin config, bridge conflist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctrexec.errors import InvalidArgument, NotFound
from ctrexec.net import cni

pytestmark = pytest.mark.unit


def conflist(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "cxtnet",
        "plugins": [
            {"type": "bridge", "bridge": "cxtbr0", "ipam": {"type": "host-local"}},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }
    base.update(over)
    return base


@pytest.mark.parametrize("version", cni.SUPPORTED_VERSIONS)
def test_load_from_mapping(version: str) -> None:
    conf = cni.load_conflist(conflist(cniVersion=version))
    assert conf.name == "cxtnet"
    assert conf.cni_version == version
    assert [p["type"] for p in conf.plugins] == ["bridge", "portmap"]
    assert conf.disable_check is False


def test_load_copies_its_input() -> None:
    data = conflist()
    conf = cni.load_conflist(data)
    data["plugins"][0]["bridge"] = "changed"
    assert conf.plugins[0]["bridge"] == "cxtbr0"
    out = conf.to_json()
    out["name"] = "other"
    assert conf.raw["name"] == "cxtnet"


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "10-cxt.conflist"
    path.write_text(json.dumps(conflist()))
    assert cni.load_conflist(path).name == "cxtnet"
    assert cni.load_conflist(str(path)).name == "cxtnet"


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        cni.load_conflist(tmp_path / "absent.conflist")


def test_invalid_json_is_invalid_argument(tmp_path: Path) -> None:
    path = tmp_path / "bad.conflist"
    path.write_text("{not json")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        cni.load_conflist(path)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([], "not a JSON object"),
        (conflist(name=None), "name"),
        (conflist(name="bad/name"), "name"),
        (conflist(name="-x"), "name"),
        (conflist(cniVersion="0.2.0"), "unsupported cniVersion"),
        (conflist(cniVersion="1.1.0"), "unsupported cniVersion"),
        (conflist(cniVersion=None), "unsupported cniVersion"),
        (conflist(plugins=None), "plugins"),
        (conflist(plugins=[]), "plugins"),
        (conflist(plugins={"type": "bridge"}), "plugins"),
        (conflist(plugins=["bridge"]), r"plugins\[0\] is not an object"),
        (conflist(plugins=[{"bridge": "x"}]), "type"),
        (conflist(plugins=[{"type": "../../bin/sh"}]), "type"),
        (conflist(plugins=[{"type": "a/b"}]), "type"),
        (conflist(plugins=[{"type": "x", "capabilities": ["portMappings"]}]), "capabilities"),
        (conflist(plugins=[{"type": "x", "capabilities": {"a": "yes"}}]), "capabilities"),
        (conflist(plugins=[{"type": "x", "ipam": "host-local"}]), "ipam"),
        (conflist(plugins=[{"type": "x", "ipam": {"type": "../x"}}]), "ipam"),
        (conflist(disableCheck="maybe"), "disableCheck"),
    ],
)
def test_invalid_conflists(data: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        cni.load_conflist(data) if isinstance(data, dict) else cni.parse_conflist(data, "<t>")


def test_single_plugin_conf_gets_a_hint() -> None:
    with pytest.raises(InvalidArgument, match="single-plugin"):
        cni.load_conflist({"cniVersion": "1.0.0", "name": "n", "type": "bridge"})


def test_disable_check_accepts_libcni_strings() -> None:
    assert cni.load_conflist(conflist(disableCheck="true")).disable_check is True
    assert cni.load_conflist(conflist(disableCheck=False)).disable_check is False


def test_load_network_from_conf_dir(tmp_path: Path) -> None:
    (tmp_path / "00-broken.conflist").write_text("{oops")
    (tmp_path / "10-other.conflist").write_text(json.dumps(conflist(name="other")))
    (tmp_path / "20-cxt.conflist").write_text(json.dumps(conflist()))
    (tmp_path / "30-dup.conflist").write_text(json.dumps(conflist(cniVersion="0.4.0")))
    runtime = cni.CNI(conf_dir=tmp_path, plugin_dirs=[tmp_path], cache_dir=tmp_path / "c")
    conf = runtime.load_network("cxtnet")
    assert conf.cni_version == "1.0.0"  # first file by name wins
    with pytest.raises(NotFound):
        runtime.load_network("absent")
    with pytest.raises(InvalidArgument):
        runtime.load_network("bad/name")


def test_cni_args_format() -> None:
    assert cni.format_cni_args(None) == ""
    assert cni.format_cni_args({}) == ""
    assert cni.format_cni_args({"K8S_POD_NAME": "web", "IP": "10.231.0.9"}) == (
        "IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.231.0.9"
    )
    assert cni.format_cni_args({"IgnoreUnknown": "0", "A": "b=c"}) == "IgnoreUnknown=0;A=b=c"


@pytest.mark.parametrize("args", [{"a;b": "c"}, {"a=b": "c"}, {"": "x"}, {"k": "v;w"}])
def test_cni_args_rejects(args: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument):
        cni.format_cni_args(args)


def test_plugin_config_injection() -> None:
    conf = cni.load_conflist(conflist())
    caps = {"portMappings": [{"hostPort": 1, "containerPort": 2, "protocol": "tcp"}], "x": 1}
    first = cni.build_plugin_config(conf, conf.plugins[0], prev_result=None, capability_args=caps)
    assert first["name"] == "cxtnet"
    assert first["cniVersion"] == "1.0.0"
    assert "runtimeConfig" not in first  # bridge declares no capability
    assert "prevResult" not in first
    prev = {"cniVersion": "1.0.0", "ips": []}
    second = cni.build_plugin_config(conf, conf.plugins[1], prev_result=prev, capability_args=caps)
    assert "capabilities" not in second
    assert second["runtimeConfig"] == {"portMappings": caps["portMappings"]}
    assert second["prevResult"] == prev
    assert second["snat"] is True
    assert "capabilities" in conf.plugins[1]  # the conflist itself is untouched


def test_plugin_config_overrides_name_and_keeps_static_runtime_config() -> None:
    data = conflist(
        plugins=[
            {
                "type": "x",
                "name": "spoofed",
                "cniVersion": "0.1.0",
                "capabilities": {"portMappings": True, "bandwidth": False},
                "runtimeConfig": {"static": 1},
            }
        ]
    )
    conf = cni.load_conflist(data)
    out = cni.build_plugin_config(
        conf,
        conf.plugins[0],
        prev_result=None,
        capability_args={"bandwidth": {}, "portMappings": []},
    )
    assert out["name"] == "cxtnet"
    assert out["cniVersion"] == "1.0.0"
    assert out["runtimeConfig"] == {"static": 1, "portMappings": []}


def test_port_mapping_values() -> None:
    assert cni.PortMapping(8080, 80).to_json() == {
        "hostPort": 8080,
        "containerPort": 80,
        "protocol": "tcp",
    }
    assert cni.PortMapping(53, 53, "udp", "127.0.0.1").to_json()["hostIP"] == "127.0.0.1"
    for bad in ((0, 80), (80, 70000), (80, 80, "icmp"), (80, 80, "tcp", "nope")):
        with pytest.raises(InvalidArgument):
            cni.PortMapping(*bad)


def test_bridge_conflist_defaults() -> None:
    conf = cni.bridge_conflist("cxtnet", "cxtbr0", "10.231.5.0/24")
    assert conf.cni_version == "1.0.0"
    bridge, portmap = conf.plugins
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == "cxtbr0"
    assert bridge["isGateway"] is True
    assert bridge["ipMasq"] is True
    assert bridge["hairpinMode"] is True
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local"
    assert ipam["dataDir"].startswith("/run/")
    assert ipam["ranges"] == [[{"subnet": "10.231.5.0/24", "gateway": "10.231.5.1"}]]
    assert ipam["routes"] == [{"dst": "0.0.0.0/0"}]
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True}


def test_bridge_conflist_options() -> None:
    conf = cni.bridge_conflist(
        "cxtnet6",
        "cxtbr6",
        "fd00:231::/64",
        gateway="fd00:231::fe",
        ports=False,
        ipam_dir="/run/x",
        mtu=1400,
        firewall=True,
    )
    assert [p["type"] for p in conf.plugins] == ["bridge", "firewall"]
    assert conf.plugins[0]["mtu"] == 1400
    assert conf.plugins[0]["ipam"]["routes"] == [{"dst": "::/0"}]
    assert conf.plugins[0]["ipam"]["ranges"][0][0]["gateway"] == "fd00:231::fe"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("bad/name", "cxtbr0", "10.231.5.0/24"), {}),
        (("cxtnet", "bridge-name-too-long", "10.231.5.0/24"), {}),
        (("cxtnet", "cxtbr0", "10.231.5.1/24"), {}),  # host bits set
        (("cxtnet", "cxtbr0", "not-a-subnet"), {}),
        (("cxtnet", "cxtbr0", "10.231.5.0/31"), {}),
        (("cxtnet", "cxtbr0", "10.231.5.0/24"), {"gateway": "10.231.6.1"}),
        (("cxtnet", "cxtbr0", "10.231.5.0/24"), {"gateway": "10.231.5.0"}),
        (("cxtnet", "cxtbr0", "10.231.5.0/24"), {"gateway": "10.231.5.255"}),
        (("cxtnet", "cxtbr0", "10.231.5.0/24"), {"gateway": "nope"}),
        (("cxtnet", "cxtbr0", "10.231.5.0/24"), {"cni_version": "0.2.0"}),
    ],
)
def test_bridge_conflist_rejects(args: tuple[str, str, str], kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        cni.bridge_conflist(*args, **kwargs)
