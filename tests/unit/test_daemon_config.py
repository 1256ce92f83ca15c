from __future__ import annotations

import tomllib
from pathlib import Path

from ctrexec._linux import mount_points, mounts_under
from ctrexec.containerd.daemon import DaemonPaths, render_config


def test_config_is_valid_toml_with_private_paths() -> None:
    paths = DaemonPaths.under(Path("/var/tmp/cxd-x"))
    cfg = tomllib.loads(render_config(paths))
    assert cfg["version"] == 2
    assert cfg["root"] == "/var/tmp/cxd-x/root"
    assert cfg["state"] == "/var/tmp/cxd-x/state"
    assert cfg["grpc"]["address"] == "/var/tmp/cxd-x/state/containerd.sock"
    assert cfg["ttrpc"]["address"].endswith(".ttrpc")
    assert "io.containerd.grpc.v1.cri" in cfg["disabled_plugins"]


MOUNTINFO = (
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:40 / /var/tmp/cxd/state/t/rootfs rw - overlay overlay rw\n"
    "41 22 0:41 / /var/tmp/cxd/state/with\\040space rw - tmpfs tmpfs rw\n"
    "42 22 0:42 / /var/tmp/cxd2 rw - tmpfs tmpfs rw\n"
)


def test_mounts_under_parses_and_unescapes() -> None:
    assert mount_points(MOUNTINFO)[2] == "/var/tmp/cxd/state/with space"
    assert mounts_under("/var/tmp/cxd", MOUNTINFO) == [
        "/var/tmp/cxd/state/t/rootfs",
        "/var/tmp/cxd/state/with space",
    ]
