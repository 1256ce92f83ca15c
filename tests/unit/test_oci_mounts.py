"""Mount and device parsing, options, and the refusals that protect the host."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import attrs
import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    Device,
    Mount,
    build_spec,
    check_mount_source,
    parse_device,
    parse_tmpfs,
    parse_volume,
    validate_mount_sources,
    with_bind_mount,
    with_devices,
    with_mount,
    with_mounts,
    with_readonly_rootfs,
    with_tmpfs,
)

pytestmark = pytest.mark.unit


def _at(spec: dict[str, Any], destination: str) -> list[dict[str, Any]]:
    return [m for m in spec["mounts"] if m["destination"] == destination]


def test_parse_volume() -> None:
    assert parse_volume("/srv/data:/data") == Mount(
        "/data", "bind", "/srv/data", ("rbind", "rprivate", "rw")
    )
    assert parse_volume("/srv/data:/data:ro").options == ("rbind", "rprivate", "ro")
    assert parse_volume("/srv/data:/data:rw,rshared").options == ("rbind", "rshared", "rw")
    assert parse_volume("/srv/data/:/data/").destination == "/data"


@pytest.mark.parametrize(
    "bad",
    [
        "relative/dir:/data",  # neither a path nor a volume's name
        "x:/data",  # a name has two characters at least
        "named:/data:rshared",  # no propagation for a volume
        "/srv:/data:nocopy",  # nocopy is for volumes
        "relative",
        "/srv:relative",
        "/srv:/data/../etc",
        "/srv/../etc:/data",
        "/srv:/data:rx",
        "/srv:/data:ro,rw",
        "/srv:/data:z",
        "/srv:/",
        "/a:/b:ro:extra",
        "",
    ],
)
def test_parse_volume_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_volume(bad)


def test_parse_tmpfs_defaults_and_overrides() -> None:
    assert parse_tmpfs("/run") == Mount("/run", "tmpfs", "tmpfs", ("nosuid", "nodev", "noexec"))
    mount = parse_tmpfs("/run:rw,size=64m,mode=1777,exec")
    assert mount.options == ("nosuid", "nodev", "rw", "size=64m", "mode=1777", "exec")
    assert parse_tmpfs("/run:size=1m,size=2m").options[-1] == "size=2m"
    assert "size=1m" not in parse_tmpfs("/run:size=1m,size=2m").options


@pytest.mark.parametrize(
    "bad", ["relative", "/run:size=lots", "/run:bogus", "/run:mode=999", "/:size=1m", "/a/../b"]
)
def test_parse_tmpfs_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_tmpfs(bad)


def test_parse_device() -> None:
    assert parse_device("/dev/fuse") == Device("/dev/fuse", "/dev/fuse", "rwm")
    assert parse_device("/dev/fuse:r") == Device("/dev/fuse", "/dev/fuse", "r")
    assert parse_device("/dev/sdb:/dev/xvdb") == Device("/dev/sdb", "/dev/xvdb", "rwm")
    assert parse_device("/dev/sdb:/dev/xvdb:rw") == Device("/dev/sdb", "/dev/xvdb", "rw")


@pytest.mark.parametrize("bad", ["dev/fuse", "/dev/fuse:/x:rwx", "/dev/fuse:/x:", "/a:/b:r:x"])
def test_parse_device_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_device(bad)


def test_with_bind_mount() -> None:
    spec = build_spec(with_bind_mount("/srv/data", "/data", readonly=True))
    assert _at(spec, "/data") == [
        {
            "destination": "/data",
            "type": "bind",
            "source": "/srv/data",
            "options": ["rbind", "rprivate", "ro"],
        }
    ]


def test_same_destination_replaces_including_defaults() -> None:
    spec = build_spec(
        with_bind_mount("/srv/a", "/data"),
        with_bind_mount("/srv/b", "/data"),
        with_tmpfs("/dev/shm", ["size=1g"]),
    )
    [data] = _at(spec, "/data")
    assert data["source"] == "/srv/b"
    [shm] = _at(spec, "/dev/shm")
    assert shm["type"] == "tmpfs"
    assert "size=1g" in shm["options"]


def test_with_tmpfs() -> None:
    [tmp] = _at(build_spec(with_tmpfs("/tmp", ["size=10m"])), "/tmp")
    assert tmp == {
        "destination": "/tmp",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "nodev", "noexec", "size=10m"],
    }


def test_with_mount_and_with_mounts() -> None:
    spec = build_spec(
        with_mount(parse_volume("/srv:/srv:ro")),
        with_mounts([parse_tmpfs("/a"), parse_tmpfs("/b")]),
    )
    assert [m["destination"] for m in spec["mounts"][-3:]] == ["/srv", "/a", "/b"]
    with pytest.raises(InvalidArgument):
        with_mount("/srv:/srv")  # type: ignore[arg-type]


def test_with_readonly_rootfs() -> None:
    assert build_spec(with_readonly_rootfs())["root"] == {"path": "rootfs", "readonly": True}
    assert (
        build_spec(with_readonly_rootfs(), with_readonly_rootfs(False))["root"]["readonly"] is False
    )


@pytest.mark.parametrize(
    "source",
    [
        "/run/containerd",
        "/run/containerd/containerd.sock",
        "/run/containerd/io.containerd.runtime.v2.task",
        "/run/netns",
        "/run/netns/group-a",
        "/run",
        "/",
        "//",
        "/var/lib/containerd",
        "/var/lib",
        "/var",
        "/run/./netns",
    ],
)
def test_unsafe_sources_are_refused(source: str) -> None:
    with pytest.raises(InvalidArgument, match="refusing to mount"):
        check_mount_source(source)
    with pytest.raises(InvalidArgument, match="refusing to mount"):
        with_bind_mount(source, "/host")


@pytest.mark.parametrize("source", ["/srv", "/run/user/1000", "/var/log", "/run/netnsx", "/tmp"])
def test_ordinary_sources_are_allowed(source: str) -> None:
    check_mount_source(source)
    build_spec(with_bind_mount(source, "/host"))


def test_configured_socket_and_its_parents_are_refused() -> None:
    address = "unix:///srv/ctr/containerd.sock"
    for source in ("/srv/ctr/containerd.sock", "/srv/ctr", "/srv"):
        with pytest.raises(InvalidArgument):
            with_bind_mount(source, "/x", containerd_address=address)
    check_mount_source("/srv/other", containerd_address=address)


def test_allow_unsafe_overrides() -> None:
    spec = build_spec(with_bind_mount("/run/netns", "/run/netns", allow_unsafe=True))
    assert _at(spec, "/run/netns")[0]["source"] == "/run/netns"
    check_mount_source("/", allow_unsafe=True)


def test_validate_mount_sources_checks_existence(tmp_path: Path) -> None:
    present = tmp_path / "present"
    present.mkdir()
    validate_mount_sources([Mount.bind(str(present), "/data")])
    with pytest.raises(InvalidArgument, match="does not exist"):
        validate_mount_sources([Mount.bind(str(tmp_path / "absent"), "/data")])
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(InvalidArgument, match="dangling"):
        validate_mount_sources([Mount.bind(str(dangling), "/data")])


def test_validate_mount_sources_resolves_symlinks(tmp_path: Path) -> None:
    guarded = tmp_path / "run" / "netns"
    guarded.mkdir(parents=True)
    sneaky = tmp_path / "innocent"
    sneaky.symlink_to(guarded)
    # Lexically fine...
    check_mount_source(str(sneaky), protected=[str(guarded)])
    # ...but refused once resolved.
    with pytest.raises(InvalidArgument, match="refusing to mount"):
        validate_mount_sources([Mount.bind(str(sneaky), "/x")], protected=[str(guarded)])
    validate_mount_sources(
        [Mount.bind(str(sneaky), "/x")], protected=[str(guarded)], allow_unsafe=True
    )


def test_validate_mount_sources_reads_spec_mounts(tmp_path: Path) -> None:
    spec = build_spec(with_bind_mount(str(tmp_path / "absent"), "/data"))
    # The default mounts (proc, tmpfs, ...) have no host source and are skipped.
    with pytest.raises(InvalidArgument, match="does not exist"):
        validate_mount_sources(spec["mounts"])
    validate_mount_sources(build_spec()["mounts"])


@attrs.frozen
class FakeStat:
    st_mode: int
    st_rdev: int
    st_uid: int = 0
    st_gid: int = 0


FAKE_DEVICES = {
    "/dev/fuse": FakeStat(stat.S_IFCHR | 0o666, os.makedev(10, 229)),
    "/dev/sdb": FakeStat(stat.S_IFBLK | 0o660, os.makedev(8, 16), 0, 6),
    "/dev/not-a-device": FakeStat(stat.S_IFREG | 0o644, 0),
}


def fake_stat(path: str) -> FakeStat:
    try:
        return FAKE_DEVICES[path]
    except KeyError:
        raise FileNotFoundError(2, "No such file or directory", path) from None


def test_with_devices() -> None:
    spec = build_spec(with_devices(["/dev/fuse", "/dev/sdb:/dev/xvdb:r"], stat=fake_stat))
    fuse = {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 0o666}
    xvdb = {"path": "/dev/xvdb", "type": "b", "major": 8, "minor": 16, "fileMode": 0o660}
    assert spec["linux"]["devices"] == [{**fuse, "uid": 0, "gid": 0}, {**xvdb, "uid": 0, "gid": 6}]
    rules = spec["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # deny-all stays first
    assert rules[-2:] == [
        {"allow": True, "type": "c", "major": 10, "minor": 229, "access": "rwm"},
        {"allow": True, "type": "b", "major": 8, "minor": 16, "access": "r"},
    ]


def test_with_devices_replaces_same_path() -> None:
    spec = build_spec(
        with_devices(["/dev/fuse"], stat=fake_stat),
        with_devices([Device("/dev/fuse", "/dev/fuse", "r")], stat=fake_stat),
    )
    assert [d["path"] for d in spec["linux"]["devices"]] == ["/dev/fuse"]


@pytest.mark.parametrize("bad", [["/dev/not-a-device"], ["/dev/missing"], "/dev/fuse"])
def test_with_devices_rejects(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        with_devices(bad, stat=fake_stat)
