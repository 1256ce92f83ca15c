"""The CNI exec protocol against fake plugins: env, stdin, stdout, cache, rollback.

The fake plugin is a small Python script (shebang: this interpreter) that logs its
CNI_* environment and stdin to a JSON-lines file and answers like a plugin would.
Its behaviour is steered through environment variables, which plugins inherit.
No root, no namespace: ``verify_netns=False`` and the "namespace" is a plain file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctrexec.errors import (
    AlreadyExists,
    CNIError,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
)
from ctrexec.net import cni

pytestmark = pytest.mark.unit

FAKE_PLUGIN = """#!{python}
import json, os, subprocess, sys, time
name = os.path.basename(sys.argv[0])
cmd = os.environ["CNI_COMMAND"]
conf = json.load(sys.stdin)
env = {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}}
with open(os.environ["CXT_FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"plugin": name, "cmd": cmd, "env": env, "stdin": conf}}) + "\\n")
if cmd == "VERSION":
    versions = os.environ.get("CXT_FAKE_VERSIONS", "0.3.0,0.3.1,0.4.0,1.0.0").split(",")
    print(json.dumps({{"cniVersion": "1.0.0", "supportedVersions": versions}}))
    sys.exit(0)
if os.environ.get("CXT_FAKE_SLEEP") == name + ":" + cmd:
    child = subprocess.Popen(["sleep", "60"])
    with open(os.environ["CXT_FAKE_CHILD"], "w") as f:
        f.write(str(child.pid))
    time.sleep(60)
if name + ":" + cmd in os.environ.get("CXT_FAKE_FAIL", "").split(","):
    print(json.dumps({{"cniVersion": conf["cniVersion"], "code": 7, "msg": "boom",
                      "details": name + " refused " + cmd}}))
    sys.exit(1)
if os.environ.get("CXT_FAKE_CRASH") == name + ":" + cmd:
    sys.stderr.write("panic: fake crash\\n")
    sys.exit(2)
if cmd == "ADD":
    result = conf.get("prevResult")
    if result is None:
        ip = {{"address": "10.231.0.5/24", "gateway": "10.231.0.1", "interface": 0}}
        if conf["cniVersion"] != "1.0.0":
            ip["version"] = "4"
        result = {{
            "cniVersion": conf["cniVersion"],
            "interfaces": [{{"name": os.environ["CNI_IFNAME"], "mac": "02:00:00:00:00:05",
                             "sandbox": os.environ["CNI_NETNS"]}}],
            "ips": [ip],
            "routes": [{{"dst": "0.0.0.0/0"}}],
            "dns": {{}},
        }}
    if os.environ.get("CXT_FAKE_SILENT") != name:
        print(json.dumps(result))
"""


class Fake:
    """A plugin dir with fake plugins, a CNI runtime on it, and the call log."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.log = tmp_path / "calls.jsonl"
        self.log.touch()
        for name in ("cxt-a", "cxt-b", "cxt-ipam"):
            path = self.bin / name
            path.write_text(FAKE_PLUGIN.format(python=sys.executable))
            path.chmod(0o755)
        self.netns = tmp_path / "netns"
        self.netns.touch()
        self.cache = tmp_path / "cache"
        self.runtime = cni.CNI(
            plugin_dirs=[tmp_path / "nothing-here", self.bin],
            conf_dir=tmp_path / "conf",
            cache_dir=self.cache,
            verify_netns=False,
            timeout=20,
        )
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("CXT_FAKE_LOG", str(self.log))
        monkeypatch.setenv("CXT_FAKE_CHILD", str(tmp_path / "child.pid"))
        monkeypatch.setenv("CNI_LEAKED", "from-parent")

    def conf(self, version: str = "1.0.0", **over: Any) -> cni.NetworkConfigList:
        data: dict[str, Any] = {
            "cniVersion": version,
            "name": "cxtnet",
            "plugins": [
                {"type": "cxt-a", "ipam": {"type": "cxt-ipam"}, "capabilities": {"x": False}},
                {"type": "cxt-b", "capabilities": {"portMappings": True}},
            ],
        }
        data.update(over)
        return cni.load_conflist(data)

    def calls(self, *, skip_version: bool = True) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [c for c in lines if not (skip_version and c["cmd"] == "VERSION")]

    def reset(self) -> None:
        self.log.write_text("")

    def add(self, conf: cni.NetworkConfigList, **kw: Any) -> cni.CNIResult:
        return self.runtime.add(conf, "cxt-c1", str(self.netns), **kw)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    return Fake(tmp_path, monkeypatch)


PORTS = [cni.PortMapping(38080, 80)]


def test_add_protocol(fake: Fake) -> None:
    conf = fake.conf()
    res = fake.add(conf, args={"FOO": "bar"}, port_mappings=PORTS)
    assert res.container_ips("eth0")[0].address == "10.231.0.5/24"
    calls = fake.calls(skip_version=False)
    assert [(c["plugin"], c["cmd"]) for c in calls] == [
        ("cxt-a", "VERSION"),
        ("cxt-b", "VERSION"),
        ("cxt-a", "ADD"),
        ("cxt-b", "ADD"),
    ]
    a, b = calls[2], calls[3]
    assert a["env"] == {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "cxt-c1",
        "CNI_NETNS": str(fake.netns),
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "IgnoreUnknown=1;FOO=bar",
        "CNI_PATH": f"{fake.runtime.plugin_dirs[0]}:{fake.bin}",
    }
    assert a["stdin"]["name"] == "cxtnet"
    assert a["stdin"]["cniVersion"] == "1.0.0"
    assert a["stdin"]["ipam"] == {"type": "cxt-ipam"}
    assert "capabilities" not in a["stdin"]
    assert "runtimeConfig" not in a["stdin"]
    assert "prevResult" not in a["stdin"]
    assert b["stdin"]["runtimeConfig"] == {"portMappings": [p.to_json() for p in PORTS]}
    assert b["stdin"]["prevResult"]["ips"][0]["address"] == "10.231.0.5/24"
    cached = fake.runtime.attachment("cxtnet", "cxt-c1", "eth0")
    assert cached is not None
    assert cached.result == res
    assert cached.netns == str(fake.netns)
    assert cached.capability_args == {"portMappings": [p.to_json() for p in PORTS]}
    path = fake.cache / "cxtnet+cxt-c1+eth0.json"
    assert path.exists()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [x.container_id for x in fake.runtime.attachments()] == ["cxt-c1"]


def test_version_answers_are_cached(fake: Fake) -> None:
    conf = fake.conf()
    fake.add(conf)
    fake.runtime.delete(conf, "cxt-c1")
    fake.reset()
    fake.add(conf)
    assert "VERSION" not in [c["cmd"] for c in fake.calls(skip_version=False)]


def test_second_add_is_refused_before_any_plugin_runs(fake: Fake) -> None:
    conf = fake.conf()
    fake.add(conf)
    fake.reset()
    with pytest.raises(AlreadyExists):
        fake.add(conf)
    assert fake.calls() == []
    # Another interface of the same container is a different attachment.
    fake.runtime.add(conf, "cxt-c1", str(fake.netns), "eth1")


def test_check_uses_cached_result(fake: Fake) -> None:
    conf = fake.conf()
    res = fake.add(conf, port_mappings=PORTS)
    fake.reset()
    fake.runtime.check("cxtnet", "cxt-c1")
    calls = fake.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [("cxt-a", "CHECK"), ("cxt-b", "CHECK")]
    for call in calls:
        assert call["stdin"]["prevResult"] == res.to_json()
        assert call["env"]["CNI_NETNS"] == str(fake.netns)
    assert calls[1]["stdin"]["runtimeConfig"]["portMappings"] == [PORTS[0].to_json()]


def test_check_without_add_is_not_found(fake: Fake) -> None:
    with pytest.raises(NotFound):
        fake.runtime.check(fake.conf(), "cxt-c1")


def test_check_disabled_or_too_old(fake: Fake) -> None:
    fake.add(fake.conf(disableCheck=True))
    fake.reset()
    fake.runtime.check("cxtnet", "cxt-c1")
    assert fake.calls() == []
    fake.runtime.delete("cxtnet", "cxt-c1")
    fake.add(fake.conf("0.3.1"))
    with pytest.raises(FailedPrecondition, match=r"0\.4\.0"):
        fake.runtime.check("cxtnet", "cxt-c1")


@pytest.mark.parametrize("version", cni.SUPPORTED_VERSIONS)
def test_delete_protocol(fake: Fake, version: str) -> None:
    conf = fake.conf(version)
    res = fake.add(conf, args={"FOO": "bar"}, port_mappings=PORTS)
    assert res.cni_version == version
    fake.reset()
    fake.runtime.delete("cxtnet", "cxt-c1")
    calls = fake.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [("cxt-b", "DEL"), ("cxt-a", "DEL")]
    for call in calls:
        assert call["env"]["CNI_ARGS"] == "IgnoreUnknown=1;FOO=bar"
        assert call["env"]["CNI_NETNS"] == str(fake.netns)
        if version in ("0.3.0", "0.3.1"):
            assert "prevResult" not in call["stdin"]  # DEL got prevResult in 0.4.0
        else:
            assert call["stdin"]["prevResult"] == res.to_json()
    assert calls[0]["stdin"]["runtimeConfig"]["portMappings"] == [PORTS[0].to_json()]
    assert fake.runtime.attachment("cxtnet", "cxt-c1") is None


def test_delete_is_idempotent(fake: Fake) -> None:
    conf = fake.conf()
    fake.add(conf, port_mappings=PORTS)
    fake.runtime.delete(conf, "cxt-c1")
    fake.reset()
    # Cache gone, conflist given: plugins still run, with no prevResult.
    fake.runtime.delete(conf, "cxt-c1", port_mappings=PORTS)
    calls = fake.calls()
    assert [c["cmd"] for c in calls] == ["DEL", "DEL"]
    assert all("prevResult" not in c["stdin"] for c in calls)
    assert calls[0]["env"]["CNI_NETNS"] == ""
    fake.reset()
    # Nothing cached and no such network in conf_dir: nothing to do.
    fake.runtime.delete("cxtnet", "cxt-c1")
    assert fake.calls() == []


def test_delete_with_vanished_netns_passes_empty(fake: Fake) -> None:
    fake.add(fake.conf())
    fake.netns.unlink()
    fake.reset()
    fake.runtime.delete("cxtnet", "cxt-c1")
    assert [c["env"]["CNI_NETNS"] for c in fake.calls()] == ["", ""]


def test_plugin_error_rolls_back(fake: Fake) -> None:
    fake.monkeypatch.setenv("CXT_FAKE_FAIL", "cxt-b:ADD")
    with pytest.raises(CNIError) as info:
        fake.add(fake.conf(), port_mappings=PORTS)
    assert info.value.code == 7
    assert info.value.details == "cxt-b refused ADD"
    assert "boom" in str(info.value)
    calls = fake.calls()
    assert [(c["plugin"], c["cmd"]) for c in calls] == [
        ("cxt-a", "ADD"),
        ("cxt-b", "ADD"),
        ("cxt-b", "DEL"),
        ("cxt-a", "DEL"),
    ]
    assert calls[2]["stdin"]["prevResult"]["ips"]  # what the chain had produced so far
    assert fake.runtime.attachment("cxtnet", "cxt-c1") is None
    fake.monkeypatch.delenv("CXT_FAKE_FAIL")
    fake.add(fake.conf())  # nothing left over blocks a new ADD


def test_failed_rollback_keeps_a_pending_record_for_delete(fake: Fake) -> None:
    fake.monkeypatch.setenv("CXT_FAKE_FAIL", "cxt-b:ADD,cxt-a:DEL")
    with pytest.raises(CNIError):
        fake.add(fake.conf(), port_mappings=PORTS)
    pending = fake.runtime.attachment("cxtnet", "cxt-c1")
    assert pending is not None
    assert pending.result is None
    with pytest.raises(AlreadyExists):
        fake.add(fake.conf())
    with pytest.raises(FailedPrecondition):
        fake.runtime.check("cxtnet", "cxt-c1")
    with pytest.raises(CNIError):
        fake.runtime.delete("cxtnet", "cxt-c1")  # a failed DEL keeps the record too
    assert fake.runtime.attachment("cxtnet", "cxt-c1") is not None
    fake.monkeypatch.delenv("CXT_FAKE_FAIL")
    fake.reset()
    fake.runtime.delete("cxtnet", "cxt-c1")
    calls = fake.calls()
    assert [c["cmd"] for c in calls] == ["DEL", "DEL"]
    assert calls[0]["stdin"]["runtimeConfig"]["portMappings"] == [PORTS[0].to_json()]
    assert fake.runtime.attachment("cxtnet", "cxt-c1") is None


def test_crash_without_error_json(fake: Fake) -> None:
    fake.monkeypatch.setenv("CXT_FAKE_CRASH", "cxt-a:ADD")
    with pytest.raises(CNIError, match="panic: fake crash") as info:
        fake.add(fake.conf())
    assert info.value.code == 0


def test_add_without_result_is_an_error(fake: Fake) -> None:
    fake.monkeypatch.setenv("CXT_FAKE_SILENT", "cxt-a")
    conf = fake.conf(plugins=[{"type": "cxt-a"}])
    with pytest.raises(NetworkError, match="no result"):
        fake.add(conf)
    assert fake.runtime.attachment("cxtnet", "cxt-c1") is None


def test_missing_plugin_is_refused_before_any_add(fake: Fake) -> None:
    conf = fake.conf(plugins=[{"type": "cxt-a"}, {"type": "cxt-absent"}])
    with pytest.raises(InvalidArgument, match="cxt-absent"):
        fake.add(conf)
    missing_ipam = fake.conf(plugins=[{"type": "cxt-a", "ipam": {"type": "cxt-noipam"}}])
    with pytest.raises(InvalidArgument, match="cxt-noipam"):
        fake.add(missing_ipam)
    assert fake.calls(skip_version=False) == []  # not even VERSION ran


def test_unsupported_version_is_refused_before_any_add(fake: Fake) -> None:
    fake.monkeypatch.setenv("CXT_FAKE_VERSIONS", "0.3.1")
    with pytest.raises(InvalidArgument, match=r"does not support cniVersion 1\.0\.0"):
        fake.add(fake.conf())
    assert fake.calls() == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"container_id": "bad/id"},
        {"ifname": "much-too-long-ifname"},
        {"netns_path": "relative/ns"},
        {"args": {"A;B": "c"}},
        {"capability_args": {"portMappings": []}, "port_mappings": PORTS},
        {"capability_args": {"x": object()}},
    ],
)
def test_bad_arguments_are_refused_before_any_plugin_runs(
    fake: Fake, kwargs: dict[str, Any]
) -> None:
    call: dict[str, Any] = {"container_id": "cxt-c1", "netns_path": str(fake.netns)}
    call.update(kwargs)
    with pytest.raises(InvalidArgument):
        fake.runtime.add(fake.conf(), **call)
    assert fake.calls(skip_version=False) == []


def test_host_namespace_is_refused(tmp_path: Path) -> None:
    runtime = cni.CNI(plugin_dirs=[tmp_path], conf_dir=tmp_path, cache_dir=tmp_path)
    conf = cni.load_conflist({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "x"}]})
    with pytest.raises(InvalidArgument, match="host"):
        runtime.add(conf, "cxt-c1", "/proc/self/ns/net")


def test_timeout_kills_the_plugin_and_its_children(fake: Fake) -> None:
    fake.runtime.timeout = 1.5
    fake.monkeypatch.setenv("CXT_FAKE_SLEEP", "cxt-a:ADD")
    with pytest.raises(NetworkError, match="timed out"):  # the plugin sleeps 60 s
        fake.add(fake.conf(plugins=[{"type": "cxt-a"}]))
    child = int((fake.bin.parent / "child.pid").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # killed by the session kill; reaped by init
    status = Path(f"/proc/{child}/stat")
    assert not status.exists() or status.read_text().split()[2] == "Z"


def test_plugin_runs_in_its_own_session_with_clean_env(fake: Fake) -> None:
    fake.add(fake.conf())
    for call in fake.calls():
        assert "CNI_LEAKED" not in call["env"]


def test_runtime_needs_a_plugin_dir(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument):
        cni.CNI(plugin_dirs=[])
    single = cni.CNI(plugin_dirs=str(tmp_path))
    assert single.plugin_dirs == (str(tmp_path),)


def test_find_plugin_rejects_path_like_types(fake: Fake) -> None:
    for bad in ("../cxt-a", "/bin/sh", "cxt-a/x"):
        with pytest.raises(InvalidArgument):
            fake.runtime.find_plugin(bad)
    assert fake.runtime.find_plugin("cxt-a") == str(fake.bin / "cxt-a")
    (fake.bin / "cxt-noexec").write_text("#!/bin/sh\n")
    with pytest.raises(InvalidArgument):
        fake.runtime.find_plugin("cxt-noexec")


def test_corrupt_cache(fake: Fake) -> None:
    fake.cache.mkdir()
    path = fake.cache / "cxtnet+cxt-c1+eth0.json"
    path.write_text("{broken")
    with pytest.raises(NetworkError):
        fake.runtime.attachment("cxtnet", "cxt-c1")
    assert fake.runtime.attachments() == []
    with pytest.raises(AlreadyExists):
        fake.add(fake.conf())  # an unreadable record still means "an ADD happened"
    fake.runtime.delete(fake.conf(), "cxt-c1")  # falls back to the given conflist
    assert not path.exists()
    assert os.listdir(fake.cache) == []
