"""Images against a real containerd: resolve, adopt from another namespace, unpack, read."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import secrets
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from google.protobuf import empty_pb2

from ctrexec import _linux, _rpc, errors, remove_image
from ctrexec._api.containerd.services.namespaces.v1 import namespace_pb2
from ctrexec.containerd import content, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.containerd.snapshots import SnapshotInfo
from ctrexec.images import lookup
from ctrexec.images import store as imagestore

SOURCE_NS = "default"
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nsvc:x:4242:4242:svc:/srv:/bin/false\n"
GROUP = b"root:x:0:\nsvc:x:4242:\n"


# -- a two-layer, docker-media-type, two-platform image built here --------------------------


def _tar(entries: list[tuple[str, str, bytes | str]]) -> bytes:
    """(name, kind, data-or-link) with kind in dir/file/link; sorted, mtime 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                info.linkname = str(data)
                tar.addfile(info)
            else:
                raw = data if isinstance(data, bytes) else data.encode()
                info.size, info.mode = len(raw), 0o644
                tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_archive(out: Path, name: str, marker: str) -> dict[str, object]:
    """An OCI layout whose image is a docker manifest list (host + another platform),
    docker schema 2 manifests and configs, a gzip layer and a plain tar layer."""
    blobs: dict[str, bytes] = {}

    def add(media_type: str, data: bytes) -> dict[str, object]:
        blobs[_sha(data)] = data
        return {"mediaType": media_type, "digest": _sha(data), "size": len(data)}

    layer1 = _tar(
        [
            ("data", "dir", b""),
            ("data/secret", "file", b"deleted by layer 2\n"),
            ("etc", "dir", b""),
            ("etc/group", "file", GROUP),
            ("etc/passwd", "file", PASSWD),
            ("etc/passwd-abs", "link", "/etc/passwd"),
            ("etc/passwd-rel", "link", "../../../../../etc/./passwd"),
            ("etc/escape", "link", "../../../../../../../etc/shadow"),
            ("etc/loop", "link", "loop"),
        ]
    )
    layer2 = _tar(
        [
            ("data", "dir", b""),
            ("data/.wh.secret", "file", b""),
            ("etc", "dir", b""),
            ("etc/marker", "file", marker),
        ]
    )
    host = Platform.host()

    def image(plat: Platform, layers: list[tuple[str, bytes]]) -> dict[str, object]:
        config = {
            "architecture": plat.architecture,
            "os": plat.os,
            **({"variant": plat.variant} if plat.variant else {}),
            "config": {
                "Entrypoint": ["/bin/app"],
                "Cmd": None,
                "Env": ["PATH=/bin", "MARKER=" + marker],
                "User": "svc",
                "ExposedPorts": {"8080/tcp": {}},
                "Volumes": {"/data": {}},
            },
            "rootfs": {"type": "layers", "diff_ids": [_sha(tar) for _, tar in layers]},
        }
        cfg = add(content.MT_DOCKER_CONFIG, json.dumps(config).encode())
        layer_descs = [
            add(mt, gzip.compress(tar, mtime=0) if mt.endswith("gzip") else tar)
            for mt, tar in layers
        ]
        manifest = {
            "schemaVersion": 2,
            "mediaType": content.MT_DOCKER_MANIFEST,
            "config": cfg,
            "layers": layer_descs,
        }
        return add(content.MT_DOCKER_MANIFEST, json.dumps(manifest).encode())

    host_m = image(
        host, [(content.MT_DOCKER_LAYER_GZIP, layer1), (content.MT_DOCKER_LAYER, layer2)]
    )
    other = Platform("linux", "s390x")
    other_m = image(other, [(content.MT_DOCKER_LAYER_GZIP, _tar([("other", "dir", b"")]))])
    plat_json = {"architecture": host.architecture, "os": host.os}
    if host.variant:
        plat_json["variant"] = host.variant
    mlist = {
        "schemaVersion": 2,
        "mediaType": content.MT_DOCKER_MANIFEST_LIST,
        "manifests": [
            {**other_m, "platform": {"architecture": "s390x", "os": "linux"}},
            {**host_m, "platform": plat_json},
        ],
    }
    top = add(content.MT_DOCKER_MANIFEST_LIST, json.dumps(mlist).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{**top, "annotations": {"io.containerd.image.name": name}}],
    }
    entries: list[tuple[str, str, bytes | str]] = [
        ("blobs", "dir", b""),
        ("blobs/sha256", "dir", b""),
    ]
    entries += [(f"blobs/sha256/{d[7:]}", "file", data) for d, data in blobs.items()]
    entries += [("oci-layout", "file", b'{"imageLayoutVersion":"1.0.0"}')]
    entries += [("index.json", "file", json.dumps(index).encode())]
    out.write_bytes(_tar(entries))
    return {"index": top["digest"], "manifest": host_m["digest"], "other": other_m["digest"]}


def _blob_bytes(containerd_address: str) -> int | None:
    """Size of containerd's blob directory (None when we don't know where it is)."""
    root = Path(containerd_address).parent.parent / "root"
    blobs = root / "io.containerd.content.v1.content" / "blobs"
    if not blobs.is_dir():
        return None
    return sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file())


def _snapshots(client: Client, snapshotter: str = "overlayfs") -> dict[str, SnapshotInfo]:
    return {i.name: i for i in snapshots.list_snapshots(client, snapshotter)}


def _ctr(address: str, *args: str) -> None:
    subprocess.run(["ctr", "--address", address, *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def other_image(
    client: Client, containerd_address: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, object], int | None]]:
    """A distinct image imported with ctr into namespace ``default`` only."""
    marker = secrets.token_hex(8)
    name = f"docker.io/library/ctrexec-other-{marker}:v1"
    archive = tmp_path_factory.mktemp("other") / "other.tar"
    digests = build_archive(archive, name, marker)
    _ctr(containerd_address, "-n", SOURCE_NS, "images", "import", str(archive))
    # collect what the import left unreferenced (the other platform) before measuring
    client.delete_lease(client.create_lease().id, sync=True)
    try:
        yield name, digests, _blob_bytes(containerd_address)
    finally:
        _ctr(containerd_address, "-n", SOURCE_NS, "images", "rm", "--sync", name)
        with pytest.raises(errors.NotFound):
            lookup.get_image(client.with_namespace(SOURCE_NS), name)
        remove_image(client, name, force=True, sync=True)  # our adopted copy


def test_docker_namespace_is_searched_only_when_listed(
    client: Client,
    containerd_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dockerd's ``moby`` namespace is skipped unless $CTREXEC_IMAGE_NAMESPACES names it;
    set but empty, no other namespace is searched."""
    marker = secrets.token_hex(8)
    name = f"docker.io/library/ctrexec-dockerd-{marker}:v1"
    build_archive(tmp_path / "moby.tar", name, marker)
    _ctr(containerd_address, "-n", "moby", "images", "import", str(tmp_path / "moby.tar"))
    monkeypatch.delenv(images.IMAGE_NAMESPACES_ENV, raising=False)
    try:
        with pytest.raises(errors.NotFound) as skipped:
            lookup.ensure_image(client, name)
        assert "moby" not in str(skipped.value)
        assert str(skipped.value).endswith(f"; get it with: ctrexec pull {name}")
        monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "")
        with pytest.raises(errors.NotFound) as none:
            lookup.ensure_image(client, name)
        assert f" in namespace {client.namespace}; get it with" in str(none.value)
        monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "default, moby")
        assert lookup.ensure_image(client, name).name == name
        monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "moby,bad/name")
        with pytest.raises(errors.InvalidArgument, match=r"namespace in \$CTREXEC_IMAGE"):
            lookup.ensure_image(client, f"{name}-not-here")
    finally:
        _ctr(containerd_address, "-n", "moby", "images", "rm", "--sync", name)
        with contextlib.suppress(errors.NotFound):
            remove_image(client, name, force=True, sync=True)  # our adopted copy
        client._call(
            _rpc.NAMESPACES,
            "Delete",
            namespace_pb2.DeleteNamespaceRequest(name="moby"),
            empty_pb2.Empty,
        )


# -- resolving -------------------------------------------------------------------------------


def test_get_image_reads_config(client: Client, test_image: str) -> None:
    img = lookup.get_image(client, test_image)
    assert img.name == test_image
    assert img.config.cmd == ("sh",)
    assert any(e.startswith("PATH=") for e in img.config.env)
    assert img.config.stop_signal == "SIGTERM"
    assert img.platform == Platform.host()
    assert img.manifest.digest == img.digest  # a plain manifest, no index
    assert len(img.layers) == len(img.diff_ids) == len(img.chain_ids) == 1
    assert img.chain_ids[0] == img.diff_ids[0]
    assert img.layers[0].media_type == content.MT_OCI_LAYER_GZIP
    assert img.size == img.manifest.size + img.config_descriptor.size + img.layers[0].size
    # short names resolve the way docker resolves them
    assert lookup.get_image(client, "ctrexec-test") == img


def test_list_images(client: Client, test_image: str) -> None:
    found = {s.name: s for s in images.list_images(client)}
    summary = found[test_image]
    assert summary.digest == lookup.get_image(client, test_image).digest
    assert summary.size > 1000
    assert summary.created is not None


def test_missing_image_is_one_line_not_found(client: Client) -> None:
    with pytest.raises(errors.NotFound) as exc:
        lookup.get_image(client, "ctrexec-missing")
    assert str(exc.value) == (
        "image 'ctrexec-missing' not found (docker.io/library/ctrexec-missing:latest)"
    )
    with pytest.raises(errors.NotFound) as exc2:
        lookup.ensure_image(client, "ctrexec-missing:v9")
    assert "\n" not in str(exc2.value)
    assert "ctrexec-test" in str(exc2.value)
    assert "docker.io/library/ctrexec-missing:v9" in str(exc2.value)
    assert str(exc2.value).endswith("; get it with: ctrexec pull ctrexec-missing:v9")
    with pytest.raises(errors.NotFound):
        remove_image(client, "ctrexec-missing")


def test_bad_reference_is_rejected_before_any_call(client: Client) -> None:
    with pytest.raises(errors.InvalidArgument):
        lookup.get_image(client, "Busybox")
    with pytest.raises(errors.InvalidArgument):
        lookup.ensure_image(client, "busybox:bad tag")
    with pytest.raises(errors.InvalidArgument):
        lookup.ensure_image(client, "busybox", snapshotter="over/lay")
    with pytest.raises(errors.InvalidArgument):
        lookup.ensure_image(client, "busybox", platform="linux//amd64")


def test_ensure_test_image_is_noop(client: Client, test_image: str) -> None:
    # ctr import already unpacked it; ensure only checks
    before = _snapshots(client)
    img = lookup.ensure_image(client, test_image)
    assert images.is_unpacked(client, img)
    assert _snapshots(client).keys() == before.keys()
    labels = content.info(client, img.config_digest).labels
    assert labels["containerd.io/gc.ref.snapshot.overlayfs"] == img.top_chain_id


# -- adoption from another namespace, unpack, GC ---------------------------------------------


def test_adopt_from_default_namespace(
    client: Client,
    containerd_address: str,
    other_image: tuple[str, dict[str, object], int | None],
) -> None:
    name, digests, blob_bytes = other_image
    source = client.with_namespace(SOURCE_NS)
    with pytest.raises(errors.NotFound):
        lookup.get_image(client, name)
    src_img = lookup.get_image(source, name)
    assert src_img.indexes[0].digest == digests["index"]
    assert src_img.manifest.digest == digests["manifest"]

    img = lookup.ensure_image(client, name)

    # nothing was copied: the blobs were already on disk
    assert _blob_bytes(containerd_address) == blob_bytes
    assert img == attrs.evolve(src_img, labels=img.labels)
    assert img.target.media_type == content.MT_DOCKER_MANIFEST_LIST
    assert img.manifest.media_type == content.MT_DOCKER_MANIFEST
    assert img.config_descriptor.media_type == content.MT_DOCKER_CONFIG
    assert [d.media_type for d in img.layers] == [
        content.MT_DOCKER_LAYER_GZIP,
        content.MT_DOCKER_LAYER,
    ]
    assert img.config.entrypoint == ("/bin/app",)
    assert img.config.cmd == ()
    assert img.config.user == "svc"
    assert img.config.exposed_ports == ("8080/tcp",)
    assert img.config.volumes == ("/data",)

    # our chain IDs are the snapshot names containerd's own unpack (ctr import) used
    assert set(img.chain_ids) <= _snapshots(source).keys()

    # GC labels chain index -> manifest -> config/layers -> top snapshot
    gc = content.GC_REF_CONTENT
    index_labels = content.info(client, img.target.digest).labels
    assert digests["manifest"] in index_labels.values()
    assert all(k.startswith(gc + "m.") for k in index_labels if k.startswith(gc))
    manifest_labels = content.info(client, img.manifest.digest).labels
    assert manifest_labels[gc + "config"] == img.config_digest
    assert manifest_labels[gc + "l.0"] == img.layers[0].digest
    assert manifest_labels[gc + "l.1"] == img.layers[1].digest
    config_labels = content.info(client, img.config_digest).labels
    assert config_labels["containerd.io/gc.ref.snapshot.overlayfs"] == img.top_chain_id

    # unpacked: every layer committed on its parent
    snaps = _snapshots(client)
    parent = ""
    for chain_id in img.chain_ids:
        assert snaps[chain_id].kind == "committed"
        assert snaps[chain_id].parent == parent
        parent = chain_id
    assert client.leases() == []

    # a second call is a no-op
    assert lookup.ensure_image(client, name) == img
    assert _snapshots(client).keys() == snaps.keys()
    assert _blob_bytes(containerd_address) == blob_bytes


def test_unpacked_image_survives_gc(
    client: Client, other_image: tuple[str, dict[str, object], int | None]
) -> None:
    name = other_image[0]
    img = lookup.ensure_image(client, name)
    # control: an active snapshot only a lease held goes with the lease
    control = f"ctrexec-test-gc-control-{secrets.token_hex(4)}"
    with client.lease() as lease:
        snapshots.prepare_rootfs(client, control, img.top_chain_id, lease=lease.id)
    client.delete_lease(client.create_lease().id, sync=True)  # runs GC now
    assert snapshots.stat_snapshot(client, control, "overlayfs") is None
    for chain_id in img.chain_ids:
        info = snapshots.stat_snapshot(client, chain_id, "overlayfs")
        assert info is not None
        assert info.kind == "committed"
    for desc in (img.target, img.manifest, img.config_descriptor, *img.layers):
        assert content.exists(client, desc.digest)


def test_concurrent_unpack_other_snapshotter(
    client: Client, other_image: tuple[str, dict[str, object], int | None]
) -> None:
    """Two unpacks racing on one image both succeed (native snapshotter: fresh)."""
    img = lookup.ensure_image(client, other_image[0])
    results: list[str] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            results.append(images.unpack(client, img, snapshotter="native"))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert results == [img.top_chain_id] * 3
    assert images.is_unpacked(client, img, "native")
    native = _snapshots(client, "native")
    assert set(img.chain_ids) <= native.keys()
    assert all(i.kind == "committed" for i in native.values())
    labels = content.info(client, img.config_digest).labels
    assert labels["containerd.io/gc.ref.snapshot.native"] == img.top_chain_id


# -- reading files -------------------------------------------------------------------------


def _our_mounts() -> list[str]:
    return [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if "ctrexec-rootfs-" in line
    ]


def test_read_rootfs_files_two_layers(
    client: Client, other_image: tuple[str, dict[str, object], int | None]
) -> None:
    img = lookup.ensure_image(client, other_image[0])
    marker = img.config.env[1].split("=", 1)[1]
    with client.lease() as lease:  # two layers: the view is an overlay, not a bind
        key = f"ctrexec-test-view-{secrets.token_hex(4)}"
        view = snapshots.view_snapshot(
            client, key, img.top_chain_id, snapshotter="overlayfs", lease=lease.id
        )
        snapshots.remove_snapshot(client, key)
    assert [m.type for m in view] == ["overlay"]
    mounts_before = Path("/proc/self/mountinfo").read_text().count("\n")
    files = images.read_rootfs_files(
        client,
        img,
        [
            "/etc/passwd",
            "etc/group",
            "/etc/marker",
            "/data/secret",
            "/etc/passwd-abs",
            "/etc/passwd-rel",
            "/../../etc/passwd",
            "/etc/escape",
            "/etc/loop",
            "/etc",
            "/etc/passwd/x",
            "/nope",
        ],
    )
    assert files == {
        "/etc/passwd": PASSWD,
        "etc/group": GROUP,
        "/etc/marker": marker.encode(),
        "/data/secret": None,  # whited out by layer 2
        "/etc/passwd-abs": PASSWD,  # absolute symlink resolved inside the image
        "/etc/passwd-rel": PASSWD,
        "/../../etc/passwd": PASSWD,
        "/etc/escape": None,  # would be the host's /etc/shadow if it escaped
        "/etc/loop": None,
        "/etc": None,
        "/etc/passwd/x": None,
        "/nope": None,
    }
    assert _our_mounts() == []
    assert Path("/proc/self/mountinfo").read_text().count("\n") == mounts_before
    views = [i for i in _snapshots(client).values() if i.kind == "view"]
    assert views == []
    assert client.leases() == []


def test_private_mount_namespace_hides_mounts(tmp_path: Path) -> None:
    target = tmp_path / "mnt"
    target.mkdir()

    def inside() -> tuple[bool, bool]:
        _linux.mount_readonly(
            [snapshots.RootfsMount("tmpfs", "tmpfs", "", ("size=1m",))], str(target)
        )
        try:
            here = str(target) in Path("/proc/thread-self/mountinfo").read_text()
            main = str(target) in Path("/proc/self/mountinfo").read_text()
            return here, main
        finally:
            _linux.unmount_all_at(str(target))

    assert _linux.in_private_mount_namespace(inside) == (True, False)
    assert str(target) not in Path("/proc/self/mountinfo").read_text()


def test_read_rootfs_files_single_layer(client: Client, test_image: str) -> None:
    img = lookup.ensure_image(client, test_image)
    files = images.read_rootfs_files(client, img, ["/etc/passwd", "/etc/missing", "/bin/sh"])
    assert files["/etc/passwd"] is not None
    assert b"app:x:1000:1000" in files["/etc/passwd"]
    assert files["/etc/missing"] is None
    assert files["/bin/sh"] is not None and files["/bin/sh"][:4] == b"\x7fELF"
    assert _our_mounts() == []


def test_read_rootfs_files_cleans_up_on_error(client: Client, test_image: str) -> None:
    img = lookup.ensure_image(client, test_image)
    with pytest.raises(errors.ResourceExhausted):
        images.read_rootfs_files(client, img, ["/bin/busybox"], max_bytes=10)
    assert _our_mounts() == []
    assert [i for i in _snapshots(client).values() if i.kind == "view"] == []
    assert client.leases() == []
    with pytest.raises(errors.InvalidArgument):
        images.read_rootfs_files(client, img, ["bad\0path"])


def test_read_rootfs_files_needs_unpacked_image(client: Client, test_image: str) -> None:
    img = lookup.get_image(client, test_image)
    bogus = attrs.evolve(img, chain_ids=("sha256:" + "0" * 64,))
    with pytest.raises(errors.FailedPrecondition):
        images.read_rootfs_files(client, bogus, ["/etc/passwd"])
    assert client.leases() == []


# -- snapshot helpers and content writes -------------------------------------------------------


def test_prepare_and_remove_rootfs(client: Client, test_image: str) -> None:
    img = lookup.ensure_image(client, test_image)
    key = f"ctrexec-test-rootfs-{secrets.token_hex(4)}"
    with client.lease() as lease:
        mounts = snapshots.prepare_rootfs(
            client, key, img.top_chain_id, lease=lease.id, labels={"test": "rootfs"}
        )
        try:
            assert mounts and mounts[0].to_proto().type == mounts[0].type
            assert snapshots.snapshot_mounts(client, key) == mounts
            info = snapshots.stat_snapshot(client, key, "overlayfs")
            assert info is not None
            assert (info.kind, info.parent, info.labels["test"]) == (
                "active",
                img.top_chain_id,
                "rootfs",
            )
        finally:
            snapshots.remove_snapshot(client, key)
    snapshots.remove_snapshot(client, key)  # already gone: fine
    assert snapshots.stat_snapshot(client, key, "overlayfs") is None


def test_write_and_read_blob(client: Client) -> None:
    data = secrets.token_bytes(3 * 1024 * 1024 + 17)  # several write chunks
    with client.lease() as lease:
        desc = Descriptor("application/octet-stream", _sha(data), len(data))
        imagestore.store_bytes(client, desc, data, lease=lease.id, labels={"test": "x"})
        assert content.read_blob(client, desc, max_size=len(data)) == data
        assert content.info(client, desc.digest).labels == {"test": "x"}
        # writing it again is fine and changes nothing
        imagestore.store_bytes(client, desc, data, lease=lease.id)
        with pytest.raises(errors.ResourceExhausted):
            content.read_blob(client, desc, max_size=10)
