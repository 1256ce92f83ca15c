"""Volumes: docker's -v and --mount syntax, and the store's files (no containerd)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrexec import labels as lbl
from ctrexec.errors import InvalidArgument, InvalidField, NotFound
from ctrexec.oci.mounts import Mount, VolumeMount, parse_mount, parse_volume
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks import volumes
from ctrexec.tasks.config import TaskConfig


def test_volume_names_and_anonymous_volumes() -> None:
    assert parse_volume("data:/srv") == VolumeMount("data", "/srv")
    assert parse_volume("my.vol_1-x:/srv/:ro,nocopy") == VolumeMount(
        "my.vol_1-x", "/srv", readonly=True, nocopy=True
    )
    assert parse_volume("/cache") == VolumeMount(None, "/cache")
    with pytest.raises(InvalidArgument, match="invalid characters for a local volume name"):
        parse_volume("bad name:/srv")


def test_mount_bind_volume_tmpfs(tmp_path: Path) -> None:
    assert parse_mount(f"type=bind,source={tmp_path},target=/d,readonly") == Mount(
        "/d", "bind", str(tmp_path), ("rbind", "rprivate", "ro")
    )
    assert parse_mount(f"type=bind,src={tmp_path},dst=/d,bind-propagation=rshared").options == (
        "rbind",
        "rshared",
        "rw",
    )
    assert parse_mount(f"type=bind,src={tmp_path},dst=/d,bind-nonrecursive").options[0] == "bind"
    assert parse_mount("type=volume,source=v1,destination=/d,ro=true") == VolumeMount(
        "v1", "/d", readonly=True
    )
    assert parse_mount("target=/d,volume-nocopy") == VolumeMount(None, "/d", nocopy=True)
    tmpfs = parse_mount("type=tmpfs,dst=/t,tmpfs-size=64m,tmpfs-mode=1770")
    assert tmpfs.type == "tmpfs" and tmpfs.destination == "/t"
    assert isinstance(tmpfs, Mount) and tmpfs.options[-2:] == ("size=64m", "mode=1770")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("type=bind,source=/x", "target is required"),
        ("type=bind,src=/x,dst=/d,bogus", "invalid field 'bogus' must be a key=value pair"),
        ("type=bind,src=/x,dst=/d,colour=red", "unexpected key 'colour' in 'colour=red'"),
        ("type=bind,dst=/d", 'type "bind": field Source must not be empty'),
        ("type=tmpfs,src=/x,dst=/d", 'type "tmpfs": field Source must not be specified'),
        ("type=bind,src=/x,dst=/d,volume-nocopy", "cannot mix 'volume-\\*' options"),
        ("type=volume,dst=/d,tmpfs-size=1m", "cannot mix 'tmpfs-\\*' options"),
        ("type=npipe,dst=/d", "invalid mount type"),
        ("type=bind,src=/x,dst=/d,readonly=maybe", "invalid value for readonly"),
        ("type=volume,src=a b,dst=/d", "invalid characters"),
        ("", "invalid mount"),
    ],
)
def test_mount_errors_are_dockers(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_mount(text)


def test_config_checks_mounts_with_the_field_named(tmp_path: Path) -> None:
    checked = taskspec.check_config(
        TaskConfig(
            name="t", image="i", volumes=["v1:/a"], mounts=[f"type=bind,src={tmp_path},dst=/b"]
        )
    )
    assert checked.volumes[0] == VolumeMount("v1", "/a")
    assert isinstance(checked.volumes[1], Mount)
    with pytest.raises(InvalidField, match=r"mounts.*bind source path does not exist: /nowhere/x"):
        taskspec.check_config(
            TaskConfig(name="t", image="i", mounts=["type=bind,src=/nowhere/x,dst=/b"])
        )


def test_store_create_get_list_and_anonymous_removal(tmp_path: Path) -> None:
    made = volumes.create("ns", "data", labels={"a": "b"}, root=tmp_path)
    assert made.mountpoint == tmp_path / "ns" / "data" / "_data" and made.mountpoint.is_dir()
    assert volumes.create("ns", "data", root=tmp_path) == made  # a taken name is that volume
    doc = volumes.get("ns", "data", root=tmp_path).to_docker()
    assert (doc["Name"], doc["Driver"], doc["Scope"], doc["Labels"]) == (
        "data",
        "local",
        "local",
        {"a": "b"},
    )
    with pytest.raises(NotFound, match="get nope: no such volume"):
        volumes.get("ns", "nope", root=tmp_path)
    (made.mountpoint / "kept").write_text("x")  # not empty: no copy-up into it
    checked = taskspec.check_config(
        TaskConfig(name="t", image="i", volumes=["data:/d:ro", "/anon", "n2:/n:nocopy"])
    )
    bound = volumes.bind_volumes(checked, "ns", root=tmp_path)
    found = bound.labels
    anon = found[lbl.ANONYMOUS_VOLUMES]
    assert len(anon) == 64 and found[lbl.VOLUMES] == f"data,{anon},n2"
    assert bound.checked.volumes[0] == Mount.bind(str(made.mountpoint), "/d", readonly=True)
    assert bound.fill == (("/anon", tmp_path / "ns" / anon / "_data"),)
    listed = [v.name for v in volumes.list_volumes("ns", root=tmp_path)]
    assert listed == sorted(["data", anon, "n2"])
    volumes.remove_anonymous("ns", found, root=tmp_path)
    assert [v.name for v in volumes.list_volumes("ns", root=tmp_path)] == ["data", "n2"]


def test_ls_filters(tmp_path: Path) -> None:
    v = volumes.create("ns", "web-data", labels={"tier": "db"}, root=tmp_path)
    assert volumes.matches(v, ["dangling=true", "name=web", "label=tier", "label=tier=db"], [])
    assert not volumes.matches(v, ["dangling=true"], ["web-data"])
    assert volumes.matches(v, ["dangling=false"], ["web-data"])
    assert not volumes.matches(v, ["label=tier=web"], [])
    with pytest.raises(InvalidArgument, match="invalid filter 'colour'"):
        volumes.matches(v, ["colour=red"], [])


class _NamespaceOnly:
    """What ``Volumes`` reads of a client when no container use is asked for."""

    namespace = "ns"


def test_the_public_volumes_object_keeps_to_its_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctrexec import Volume, Volumes

    vols = Volumes(_NamespaceOnly(), root=str(tmp_path))  # type: ignore[arg-type]
    made = vols.create("web-data", labels={"tier": "db"})
    assert isinstance(made, Volume) and made.mountpoint == tmp_path / "ns" / "web-data" / "_data"
    vols.create("cache")
    assert [v.name for v in vols.list()] == ["cache", "web-data"]
    assert [v.name for v in vols.list(filters=["label=tier=db"])] == ["web-data"]
    # Only a dangling filter asks containerd which containers use a volume.
    monkeypatch.setattr(volumes, "users", lambda client: {"cache": ["c1"]})
    assert [v.name for v in vols.list(filters=["dangling=true"])] == ["web-data"]
    assert vols.prune(everything=True) == ["web-data"]
    with pytest.raises(NotFound):
        vols.get("web-data")
    vols.remove("web-data", force=True)
    assert [v.name for v in vols.list()] == ["cache"]
