"""The default spec, build_spec, annotations, privileged, and purity of every option."""

from __future__ import annotations

import copy
import json
import os
import stat
from typing import Any

import attrs
import pytest

import ctrexec.oci as oci
from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    Mount,
    SpecOpt,
    build_spec,
    default_spec,
    with_annotations,
    with_privileged,
)
from ctrexec.oci.seccomp import host_machine
from ctrexec.tasks import spec as taskspec

pytestmark = pytest.mark.unit


def _mount(spec: dict[str, Any], destination: str) -> dict[str, Any]:
    matches = [m for m in spec["mounts"] if m["destination"] == destination]
    assert len(matches) == 1, matches
    found: dict[str, Any] = matches[0]
    return found


def test_public_names_are_exported() -> None:
    for name in oci.__all__:
        assert hasattr(oci, name), name
    assert sorted(oci.__all__) == sorted(set(oci.__all__))
    # Every with_* function in the package is public.
    with_names = {n for n in dir(oci) if n.startswith("with_")}
    assert with_names <= set(oci.__all__)


def test_default_process() -> None:
    process = default_spec()["process"]
    assert process["terminal"] is False
    assert process["user"] == {"uid": 0, "gid": 0}
    assert process["args"] == ["sh"]
    assert process["env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    assert process["cwd"] == "/"
    assert process["noNewPrivileges"] is True
    assert process["rlimits"] == [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024}]


def test_default_capabilities_are_dockers_fourteen() -> None:
    caps = default_spec()["process"]["capabilities"]
    expected = {
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FSETID",
        "CAP_FOWNER",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETFCAP",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
        "CAP_AUDIT_WRITE",
    }
    for name in ("bounding", "effective", "permitted"):
        assert set(caps[name]) == expected
        assert len(caps[name]) == 14
    assert caps["inheritable"] == []
    assert caps["ambient"] == []
    assert "CAP_SYS_ADMIN" not in caps["bounding"]
    assert "CAP_NET_ADMIN" not in caps["bounding"]


def test_default_root_hostname_and_version() -> None:
    spec = default_spec(hostname="task-1")
    assert spec["ociVersion"] == "1.1.0"
    assert spec["root"] == {"path": "rootfs", "readonly": False}
    assert spec["hostname"] == "task-1"
    assert "cgroupsPath" not in spec["linux"]
    assert default_spec(cgroups_path="/ns/id")["linux"]["cgroupsPath"] == "/ns/id"
    with pytest.raises(InvalidArgument):
        default_spec(cgroups_path="../escape")


def test_default_mounts() -> None:
    spec = default_spec()
    destinations = [m["destination"] for m in spec["mounts"]]
    assert destinations == [
        "/proc",
        "/dev",
        "/dev/pts",
        "/dev/shm",
        "/dev/mqueue",
        "/sys",
        "/sys/fs/cgroup",
    ]
    assert _mount(spec, "/proc")["type"] == "proc"
    dev = _mount(spec, "/dev")
    assert dev["type"] == "tmpfs"
    assert dev["options"] == ["nosuid", "strictatime", "mode=755", "size=65536k"]
    pts = _mount(spec, "/dev/pts")
    assert pts["type"] == "devpts"
    assert {"newinstance", "ptmxmode=0666", "mode=0620", "gid=5", "nosuid", "noexec"} <= set(
        pts["options"]
    )
    shm = _mount(spec, "/dev/shm")
    assert shm["options"] == ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]
    assert _mount(spec, "/dev/mqueue")["type"] == "mqueue"
    assert _mount(spec, "/sys")["type"] == "sysfs"
    assert "ro" in _mount(spec, "/sys")["options"]
    assert _mount(spec, "/sys/fs/cgroup")["type"] == "cgroup"
    assert "ro" in _mount(spec, "/sys/fs/cgroup")["options"]


def test_default_linux_section() -> None:
    linux = default_spec()["linux"]
    types = [n["type"] for n in linux["namespaces"]]
    assert types == ["pid", "ipc", "uts", "mount", "network", "cgroup"]
    # A fresh network namespace: no path until the group's is given.
    assert {"type": "network"} in linux["namespaces"]
    assert "/proc/kcore" in linux["maskedPaths"]
    assert "/proc/keys" in linux["maskedPaths"]
    assert "/sys/firmware" in linux["maskedPaths"]
    assert "/proc/sys" in linux["readonlyPaths"]
    assert "/proc/sysrq-trigger" in linux["readonlyPaths"]
    devices = linux["resources"]["devices"]
    assert devices[0] == {"allow": False, "access": "rwm"}
    allowed = {(d.get("major"), d.get("minor")) for d in devices[1:] if d.get("access") == "rwm"}
    # null, zero, full, random, urandom, tty, ptmx, pts/*
    assert allowed == {(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 2), (136, None)}
    assert all(d["allow"] for d in devices[1:])


def test_default_seccomp_present() -> None:
    seccomp = default_spec(arch="x86_64")["linux"]["seccomp"]
    assert seccomp["defaultAction"] == "SCMP_ACT_ERRNO"
    assert seccomp["defaultErrnoRet"] == 1
    assert seccomp["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    names = {n for rule in seccomp["syscalls"] for n in rule["names"]}
    assert {"read", "execve", "chroot"} <= names  # chroot: CAP_SYS_CHROOT is a default
    assert "ptrace" not in names


def test_default_spec_is_json_serialisable() -> None:
    spec = default_spec()
    assert json.loads(json.dumps(spec)) == spec


def test_build_spec_starts_from_default_and_applies_in_order() -> None:
    assert build_spec() == default_spec()
    spec = build_spec(oci.with_args(["a"]), oci.with_args(["b"]))
    assert spec["process"]["args"] == ["b"]


def test_build_spec_does_not_touch_base() -> None:
    base = default_spec()
    snapshot = copy.deepcopy(base)
    spec = build_spec(oci.with_cwd("/srv"), base=base)
    assert base == snapshot
    assert spec["process"]["cwd"] == "/srv"


def test_apply_opts() -> None:
    base = default_spec()
    snapshot = copy.deepcopy(base)
    spec = oci.apply_opts(base, oci.with_tty())
    assert spec["process"]["terminal"] is True
    assert base == snapshot


def test_with_annotations_merges() -> None:
    spec = build_spec(
        with_annotations({"io.containerd.runc.v2.group": "g1", "a": "1"}),
        with_annotations({"a": "2"}),
    )
    assert spec["annotations"] == {"io.containerd.runc.v2.group": "g1", "a": "2"}


@pytest.mark.parametrize("bad", [{"": "x"}, {"k": 1}, ["k=v"]])
def test_with_annotations_rejects(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        with_annotations(bad)


def test_with_privileged() -> None:
    spec = build_spec(with_privileged(capabilities=["ALL"]))
    caps = spec["process"]["capabilities"]
    for name in ("bounding", "effective", "permitted"):
        assert caps[name] == list(ALL_CAPABILITIES)
    assert caps["inheritable"] == caps["ambient"] == []
    linux = spec["linux"]
    assert "seccomp" not in linux
    assert linux["maskedPaths"] == []
    assert linux["readonlyPaths"] == []
    assert linux["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    assert "ro" not in _mount(spec, "/sys")["options"]
    assert "ro" not in _mount(spec, "/sys/fs/cgroup")["options"]
    # Privileged is not "no_new_privileges off": that stays the caller's choice.
    assert spec["process"]["noNewPrivileges"] is True


def test_with_privileged_grants_what_this_process_holds() -> None:
    held = taskspec.host_bounding_capabilities()
    assert set(held) <= set(ALL_CAPABILITIES)
    spec = build_spec(with_privileged(capabilities=held))
    assert spec["process"]["capabilities"]["bounding"] == held
    assert "seccomp" not in spec["linux"]


def test_with_privileged_narrowed_capabilities() -> None:
    spec = build_spec(with_privileged(capabilities=["SYS_ADMIN", "CAP_NET_ADMIN"]))
    assert spec["process"]["capabilities"]["bounding"] == ["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]
    with pytest.raises(InvalidArgument):
        with_privileged(capabilities=["NOPE"])


def test_default_capabilities_constant_matches_spec() -> None:
    assert set(DEFAULT_CAPABILITIES) == set(default_spec()["process"]["capabilities"]["bounding"])


@attrs.frozen
class _FakeStat:
    st_mode: int
    st_rdev: int
    st_uid: int = 0
    st_gid: int = 0


def _fake_stat(path: str) -> _FakeStat:
    return _FakeStat(stat.S_IFCHR | 0o666, os.makedev(10, 200))


# Differs from the host, so the option changes the default spec.
_OTHER_ARCH = "aarch64" if host_machine() == "x86_64" else "x86_64"

# One call of every option, by public name; the purity test runs each of them.
OPTION_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "with_added_capabilities": ((["NET_ADMIN"],), {}),
    "with_annotations": (({"a": "b"},), {}),
    "with_args": ((["echo", "hi"],), {}),
    "with_bind_mount": (("/srv/data", "/data"), {"readonly": True}),
    "with_capabilities": ((["CHOWN"],), {}),
    "with_cgroups_path": (("/ctrexec/t1",), {}),
    "with_cpu_shares": ((512,), {}),
    "with_cpus": ((1.5,), {}),
    "with_cpuset": (("0-1", "0"), {}),
    "with_cwd": (("/srv",), {}),
    "with_default_seccomp": ((), {"arch": _OTHER_ARCH}),
    "with_devices": ((["/dev/net/tun"],), {"stat": _fake_stat}),
    "with_dropped_capabilities": ((["ALL"],), {}),
    "with_env": (({"A": "1"},), {}),
    "with_host_namespace": (("ipc",), {}),
    "with_host_network": ((), {}),
    "with_hostname": (("web-1",), {}),
    "with_memory_limit": (("64m",), {}),
    "with_memory_reservation": (("32m",), {}),
    "with_mount": ((Mount.tmpfs("/run"),), {}),
    "with_mounts": (([Mount.tmpfs("/cache")],), {}),
    "with_namespace": (("user",), {}),
    "with_network_namespace": (("/run/netns/g1",), {}),
    "with_no_new_privileges": ((False,), {}),
    "with_oom_score_adj": ((500,), {}),
    "with_pids_limit": ((100,), {}),
    "with_privileged": ((), {"capabilities": ["ALL"]}),
    "with_readonly_rootfs": ((), {}),
    "with_rlimits": (({"nproc": (10, 20)},), {}),
    "with_seccomp": ((None,), {}),
    "with_sysctls": (({"net.core.somaxconn": "1024"},), {}),
    "with_tmpfs": (("/tmp", ["size=10m"]), {}),
    "with_tty": ((), {}),
    "with_user_ids": ((1000, 1000, [10]), {}),
}


def test_every_with_function_is_in_the_purity_table() -> None:
    public = {n for n in oci.__all__ if n.startswith("with_")}
    # with_memory_swap needs a memory limit first; it has its own purity test.
    assert public - set(OPTION_CALLS) == {"with_memory_swap"}


@pytest.mark.parametrize("name", sorted(OPTION_CALLS))
def test_options_do_not_mutate_their_input(name: str) -> None:
    args, kwargs = OPTION_CALLS[name]
    option: SpecOpt = getattr(oci, name)(*args, **kwargs)
    base = default_spec()
    snapshot = copy.deepcopy(base)
    result = option(base)
    assert base == snapshot
    assert result is not base
    assert result != base
    json.dumps(result)


def test_memory_swap_does_not_mutate_its_input() -> None:
    base = build_spec(oci.with_memory_limit("64m"))
    snapshot = copy.deepcopy(base)
    result = oci.with_memory_swap("128m")(base)
    assert base == snapshot
    assert result["linux"]["resources"]["memory"] == {"limit": 64 << 20, "swap": 128 << 20}
