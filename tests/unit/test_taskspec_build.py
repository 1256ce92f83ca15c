"""TaskConfig to OCI spec: the options compose in docker's order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctrexec.containerd.images import ImageConfig
from ctrexec.containerd.runtimes import RUNC_V2, RuntimeChoice
from ctrexec.oci.caps import ALL_CAPABILITIES, DEFAULT_CAPABILITIES
from ctrexec.oci.user import ResolvedUser
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig

pytestmark = pytest.mark.unit


def _spec(*, init_binary: str | None = None, **kw: Any) -> dict[str, Any]:
    cfg = TaskConfig(name="t", image="img", **kw)
    checked = taskspec.CheckedConfig(
        config=cfg,
        runtime=RuntimeChoice(shim=RUNC_V2),
        volumes=(),
        tmpfs=(),
        devices=(),
        memory=taskspec.resources.parse_size(cfg.memory) if cfg.memory else None,
        labels={},
        init_binary=init_binary,
    )
    return taskspec.build(
        checked,
        image=ImageConfig(cmd=("sh",), working_dir="/"),
        user=ResolvedUser(0, 0),
        netns_path=None,
        host_network=False,
        hostfiles=None,
        namespace="ns",
    )


def test_init_binds_tini_read_only_and_runs_the_argv_under_it() -> None:
    spec = _spec(init=True, init_binary="/usr/bin/tini-static", command=["echo", "hi"])
    assert spec["process"]["args"] == ["/sbin/docker-init", "--", "echo", "hi"]
    (mount,) = [m for m in spec["mounts"] if m["destination"] == "/sbin/docker-init"]
    assert mount["source"] == "/usr/bin/tini-static"
    assert {"ro", "rbind"} <= set(mount["options"])
    assert _spec(command=["echo"])["process"]["args"] == ["echo"]


def test_limits_reach_the_spec() -> None:
    spec = _spec(memory="64m", memory_swap="-1", shm_size="1m", ulimits=["nofile=10:20"])
    assert spec["linux"]["resources"]["memory"] == {"limit": 64 << 20, "swap": -1}
    (shm,) = [m for m in spec["mounts"] if m["destination"] == "/dev/shm"]
    assert f"size={1 << 20}" in shm["options"]
    assert spec["process"]["rlimits"] == [{"type": "RLIMIT_NOFILE", "soft": 10, "hard": 20}]


def test_pid_and_ipc_host_leave_those_namespaces_and_share_dev_shm() -> None:
    def types(spec: dict[str, Any]) -> set[str]:
        return {n["type"] for n in spec["linux"]["namespaces"]}

    assert {"pid", "ipc"} <= types(_spec())
    assert "pid" not in types(_spec(pid="host"))
    spec = _spec(ipc="host")
    assert "ipc" not in types(spec)
    (shm,) = [m for m in spec["mounts"] if m["destination"] == "/dev/shm"]
    assert (shm["type"], shm["source"]) == ("bind", "/dev/shm")
    assert {"pid", "ipc"} <= types(_spec(pid="private", ipc="shareable"))


def _caps(spec: dict[str, Any]) -> dict[str, list[str]]:
    caps: dict[str, list[str]] = spec["process"]["capabilities"]
    return caps


def test_cap_drop_all_then_add_keeps_only_the_added() -> None:
    caps = _caps(_spec(cap_drop=["ALL"], cap_add=["NET_BIND_SERVICE"]))
    for kind in ("bounding", "effective", "permitted"):
        assert caps[kind] == ["CAP_NET_BIND_SERVICE"]


def test_cap_add_and_drop_of_others_compose() -> None:
    caps = _caps(_spec(cap_drop=["chown"], cap_add=["NET_ADMIN"]))
    assert "CAP_CHOWN" not in caps["effective"]
    assert "CAP_NET_ADMIN" in caps["effective"]
    assert set(caps["effective"]) == (set(DEFAULT_CAPABILITIES) - {"CAP_CHOWN"}) | {"CAP_NET_ADMIN"}


def test_same_capability_added_and_dropped_is_added() -> None:
    # docker applies the drop list, then the add list.
    assert "CAP_KILL" in _caps(_spec(cap_drop=["KILL"], cap_add=["KILL"]))["effective"]


def test_privileged_grants_this_process_bounding_set() -> None:
    # The bounding set is read here, in taskspec, and handed to the pure oci option.
    line = next(
        x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("CapBnd:")
    )
    mask = int(line.split()[1], 16)
    held = [c for bit, c in enumerate(ALL_CAPABILITIES) if mask >> bit & 1]
    assert taskspec.host_bounding_capabilities() == held
    caps = _caps(_spec(privileged=True))
    for kind in ("bounding", "effective", "permitted"):
        assert caps[kind] == held


def test_a_cgroup_the_caller_names_replaces_ctrexecs_own() -> None:
    assert _spec()["linux"]["cgroupsPath"] == "/ctrexec/ns/t"
    nomad = "/nomad.slice/share.slice/a1.web.scope"
    assert _spec(cgroup=nomad)["linux"]["cgroupsPath"] == nomad


@pytest.mark.parametrize("bad", ["nomad/x", "/nomad/../x", "/nomad//x", "/", "a:b:c"])
def test_a_named_cgroup_must_be_absolute_and_normal(bad: str) -> None:
    from ctrexec.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        TaskConfig(name="t", image="img", cgroup=bad)
    with pytest.raises(InvalidArgument):
        TaskConfig(name="t", image="img", cpuset_cgroup=bad)
