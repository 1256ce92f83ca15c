from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from ctrexec._linux import mount_points, mounts_under
from ctrexec.containerd import daemon
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd, render_config
from ctrexec.defaults import CONTAINERD_BIN_ENV


def test_config_is_valid_toml_with_private_paths() -> None:
    paths = DaemonPaths.under(Path("/var/tmp/cxd-x"))
    cfg = tomllib.loads(render_config(paths))
    assert cfg["version"] == 2
    assert cfg["root"] == "/var/tmp/cxd-x/root"
    assert cfg["state"] == "/var/tmp/cxd-x/state"
    assert cfg["grpc"]["address"] == "/var/tmp/cxd-x/state/containerd.sock"
    assert cfg["ttrpc"]["address"].endswith(".ttrpc")
    assert "io.containerd.grpc.v1.cri" in cfg["disabled_plugins"]


def test_config_speaks_the_version_asked_for_and_disables_2x_cri() -> None:
    cfg = tomllib.loads(render_config(DaemonPaths.under(Path("/var/tmp/cxd-x")), 3))
    assert cfg["version"] == 3
    for split_off in ("io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"):
        assert split_off in cfg["disabled_plugins"]


def _fake_containerd(tmp_path: Path, default_config: str) -> Path:
    """A script that answers ``config default`` as a containerd binary would."""
    exe = tmp_path / "bin" / "containerd"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{default_config}\nEOF\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.mark.parametrize(("printed", "version"), [("version = 3", 3), ("version = 2", 2), ("", 2)])
def test_the_config_version_is_asked_of_the_binary(
    tmp_path: Path, printed: str, version: int
) -> None:
    exe = _fake_containerd(tmp_path, f"disabled_plugins = []\n{printed}\nroot = '/x'")
    assert daemon.config_version(str(exe), dict(os.environ)) == version


def test_the_binarys_directory_comes_first_on_path(tmp_path: Path) -> None:
    exe = _fake_containerd(tmp_path, "")
    env = daemon._daemon_env(str(exe))
    assert env["PATH"].split(os.pathsep)[0] == str(exe.parent)


def test_the_binary_is_named_by_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONTAINERD_BIN_ENV, "/opt/cd/containerd")
    assert EmbeddedContainerd(DaemonPaths.under(Path("/x"))).binary == "/opt/cd/containerd"
    monkeypatch.delenv(CONTAINERD_BIN_ENV)
    assert EmbeddedContainerd(DaemonPaths.under(Path("/x"))).binary == "containerd"


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
