"""Image archives and prune against a real containerd, and against the real ``ctr``.

Each test works in a namespace of its own (the session's test image is shared by
every other test), imports what it needs there with ctrexec, and at its end deletes
what is left, collects garbage and removes the namespace.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import secrets
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE, Cli
from _support import create_namespace, until

from ctrexec import _rpc, errors, remove_image
from ctrexec._api.containerd.services.content.v1 import content_pb2
from ctrexec.containerd import containers, content, images, snapshots
from ctrexec.containerd.client import Client
from ctrexec.containerd.content import Platform
from ctrexec.images import lookup
from ctrexec.images.prune import prune_images
from ctrexec.testing import content_digests

SNAPSHOTTER = "overlayfs"
ANN_REF = "org.opencontainers.image.ref.name"
ANN_IMAGE_NAME = "io.containerd.image.name"


def _ctr(address: str, namespace: str, *args: str) -> str:
    out = subprocess.run(
        ["ctr", "--address", address, "--namespace", namespace, *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def _gc(client: Client) -> None:
    client.delete_lease(client.create_lease().id, sync=True)


def _ingests(client: Client) -> list[str]:
    resp = client._call(
        _rpc.CONTENT,
        "ListStatuses",
        content_pb2.ListStatusesRequest(),
        content_pb2.ListStatusesResponse,
    )
    return [s.ref for s in resp.statuses]


def _snapshots(client: Client) -> set[str]:
    return {i.name for i in snapshots.list_snapshots(client, SNAPSHOTTER)}


def _empty(client: Client) -> list[str]:
    """What the namespace still holds after a GC: images, leases, blobs, ingests."""
    _gc(client)
    return (
        [f"image {i.name}" for i in images.list_images(client)]
        + [f"lease {le.id}" for le in client.leases()]
        + [f"content {d}" for d in content_digests(client)]
        + [f"ingest {r}" for r in _ingests(client)]
    )


@pytest.fixture
def ns(client: Client, containerd_address: str) -> Iterator[Client]:
    """A fresh containerd namespace, emptied and removed at the end."""
    name = f"cx-arch-{secrets.token_hex(4)}"
    other = client.with_namespace(name)
    create_namespace(other)
    yield other
    for c in containers.list_containers(other):
        containers.delete(other, c.id)
    for img in images.list_images(other):
        images.remove_image(other, img.name)
    for le in other.leases():
        other.delete_lease(le.id)
    until(lambda: not _empty(other), f"namespace {name} to empty")
    until(lambda: not _snapshots(other), f"snapshots of {name} to go")
    _ctr(containerd_address, "default", "namespaces", "remove", name)


# -- archives built here ------------------------------------------------------------------------


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: f.read()
            for m in tar.getmembers()
            if m.isreg() and (f := tar.extractfile(m)) is not None
        }


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _test_image_parts(archive: Path) -> tuple[dict[str, object], bytes, bytes]:
    """The test image's config (parsed) and its one layer, compressed and not."""
    files = _members(archive)
    index = json.loads(files["index.json"])
    manifest = json.loads(files["blobs/" + index["manifests"][0]["digest"].replace(":", "/")])
    config = json.loads(files["blobs/" + manifest["config"]["digest"].replace(":", "/")])
    layer_gz = files["blobs/" + manifest["layers"][0]["digest"].replace(":", "/")]
    return config, layer_gz, gzip.decompress(layer_gz)


def _marker_layer(marker: str) -> bytes:
    """A layer only this test has: a marker and 256 KiB of noise (a truncation lands in it)."""
    return _tar_bytes({"etc/marker": marker.encode(), "var/noise": os.urandom(256 * 1024)})


def _variant_config(base: dict[str, object], marker: str, diff_ids: list[str]) -> bytes:
    config = json.loads(json.dumps(base))
    config["config"]["Labels"] = {"io.ctrexec.test.marker": marker}
    config["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
    return json.dumps(config).encode()


def build_docker_save(archive: Path, out: Path, name: str, marker: str) -> bytes:
    """The test image plus a marker layer, as ``docker save`` writes it: manifest.json,
    ``<config hex>.json``, ``<id>/layer.tar`` (plus the v1 ``json``/``VERSION`` files and
    ``repositories``), the second layer.tar a symlink to a third directory's copy."""
    base, _, layer1 = _test_image_parts(archive)
    layer2 = _marker_layer(marker)
    config = _variant_config(base, marker, [_sha(layer1), _sha(layer2)])
    cfg_name = _sha(config).split(":")[1] + ".json"
    id1, id2, id3 = (secrets.token_hex(32) for _ in range(3))
    repo, tag = name.rsplit(":", 1)
    manifest = [
        {"Config": cfg_name, "RepoTags": [name], "Layers": [f"{id1}/layer.tar", f"{id2}/layer.tar"]}
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in [
            (f"{id1}/VERSION", b"1.0"),
            (f"{id1}/json", b"{}"),
            (f"{id1}/layer.tar", layer1),
            (f"{id3}/layer.tar", layer2),
            (cfg_name, config),
            ("manifest.json", json.dumps(manifest).encode()),
            ("repositories", json.dumps({repo: {tag: id2}}).encode()),
        ]:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{id2}/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, f"../{id3}/layer.tar"
        tar.addfile(link)
    out.write_bytes(buf.getvalue())
    return layer2


def _blob(data: bytes) -> str:
    return "blobs/sha256/" + hashlib.sha256(data).hexdigest()


def _desc(media_type: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _sha(data), "size": len(data)}


def build_oci_variant(
    archive: Path, out: Path, name: str, marker: str, *, corrupt: bool = False, drop: str = ""
) -> dict[str, object]:
    """An OCI layout of the test image plus a marker layer, its blob written last.
    ``corrupt`` flips one byte of that layer; ``drop`` leaves out one blob by role."""
    base, layer1_gz, layer1 = _test_image_parts(archive)
    layer2 = _marker_layer(marker)
    config = _variant_config(base, marker, [_sha(layer1), _sha(layer2)])
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": content.MT_OCI_MANIFEST,
            "config": _desc(content.MT_OCI_CONFIG, config),
            "layers": [
                _desc(content.MT_OCI_LAYER_GZIP, layer1_gz),
                _desc(content.MT_OCI_LAYER, layer2),
            ],
        }
    ).encode()
    top = _desc(content.MT_OCI_MANIFEST, manifest)
    top["annotations"] = {"io.containerd.image.name": name, ANN_REF: name.rsplit(":", 1)[1]}
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps({"schemaVersion": 2, "manifests": [top]}).encode(),
    }
    blobs = {"manifest": manifest, "config": config, "layer1": layer1_gz, "layer2": layer2}
    for role, data in blobs.items():
        if role == drop:
            continue
        if corrupt and role == "layer2":
            files[_blob(data)] = data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]
        else:
            files[_blob(data)] = data
    out.write_bytes(_tar_bytes(files))
    return {
        "manifest": _sha(manifest),
        "config": _sha(config),
        "layer2": _sha(layer2),
        "chain": snapshots.chain_ids([_sha(layer1), _sha(layer2)]),
    }


def _import(
    cli: Cli, ns: Client, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        cli.argv("import", *args, namespace=ns.namespace),
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


# -- import ---------------------------------------------------------------------------------------


def test_import_oci_layout(cli: Cli, ns: Client, test_image: str, test_image_archive: Path) -> None:
    """The session's namespace has the blobs already: committed here with no bytes."""
    out = _import(cli, ns, str(test_image_archive))
    assert out.returncode == 0, out.stderr
    name = "docker.io/library/ctrexec-test:latest"
    assert f"Loaded image: {name}" in out.stdout.decode()
    image = lookup.get_image(ns, name)
    lines = out.stderr.decode().splitlines()
    short = [d[7:19] for d in (image.manifest.digest, image.config_digest, image.layers[0].digest)]
    assert [f"{d}: already exists" for d in sorted(short)] == [
        line for line in lines if line.endswith("exists") or "downloading" in line
    ]
    assert f"{name}: unpacking" in lines
    assert images.is_unpacked(ns, image, SNAPSHOTTER)
    labels = content.info(ns, image.manifest.digest).labels
    assert labels[f"{content.GC_REF_CONTENT}config"] == image.config_digest
    assert labels[f"{content.GC_REF_CONTENT}l.0"] == image.layers[0].digest
    config_labels = content.info(ns, image.config_digest).labels
    assert config_labels[content.gc_snapshot_label(SNAPSHOTTER)] == image.top_chain_id
    assert ns.leases() == []
    again = _import(cli, ns, "--quiet", str(test_image_archive))
    assert (again.returncode, again.stdout, again.stderr) == (0, b"", b"")
    events = _import(cli, ns, "--json", str(test_image_archive))
    assert events.returncode == 0, events.stderr
    parsed = [json.loads(line) for line in events.stdout.decode().splitlines()]
    assert {"action": "imported", "ref": name, "digest": image.target.digest} in [
        {k: e[k] for k in ("action", "ref", "digest")} for e in parsed
    ]
    assert {e["action"] for e in parsed} >= {"exists", "unpacking", "imported"}


def test_import_docker_save_builds_the_manifest_ctr_builds(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path, containerd_address: str
) -> None:
    marker = secrets.token_hex(6)
    name = f"docker.io/library/cx-docker-{marker}:v1"
    archive = tmp_path / "docker.tar"
    layer2 = build_docker_save(test_image_archive, archive, name, marker)
    out = _import(cli, ns, str(archive))
    assert out.returncode == 0, out.stderr
    assert f"Loaded image: {name}" in out.stdout.decode()
    image = lookup.get_image(ns, name)
    assert image.target.media_type == content.MT_DOCKER_MANIFEST
    assert [layer.media_type for layer in image.layers] == [content.MT_DOCKER_LAYER] * 2
    assert image.layers[1].digest == _sha(layer2)
    files = images.read_rootfs_files(ns, image, ["/etc/marker", "/bin/busybox"])
    assert files["/etc/marker"] == marker.encode()
    assert files["/bin/busybox"]
    peer = ns.namespace + "-ctr"
    try:
        _ctr(containerd_address, peer, "images", "import", str(archive))
        listed = _ctr(containerd_address, peer, "images", "ls", "-q")
        assert name in listed.split()
        theirs = lookup.get_image(ns.with_namespace(peer), name)
        assert theirs.target.digest == image.target.digest  # the same manifest, byte for byte
    finally:
        _ctr(containerd_address, peer, "images", "rm", "--sync", name)
        _ctr(containerd_address, "default", "namespaces", "remove", peer)


def test_import_from_stdin(cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path) -> None:
    marker = secrets.token_hex(6)
    name = f"docker.io/library/cx-stdin-{marker}:v1"
    digests = build_oci_variant(test_image_archive, tmp_path / "v.tar", name, marker)
    data = (tmp_path / "v.tar").read_bytes()
    out = _import(cli, ns, "-", stdin=gzip.compress(data, compresslevel=1))
    assert out.returncode == 0, out.stderr
    image = lookup.get_image(ns, name)
    assert image.manifest.digest == digests["manifest"]
    assert images.read_rootfs_files(ns, image, ["/etc/marker"])["/etc/marker"] == marker.encode()


# -- export, and ctr both ways ------------------------------------------------------------------


def test_export_is_read_by_ctr(
    cli: Cli, client: Client, test_image: str, tmp_path: Path, containerd_address: str
) -> None:
    archive = tmp_path / "out.tar"
    out = cli("export", test_image, str(archive))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    members = _members(archive)
    assert {"oci-layout", "index.json", "manifest.json"} <= set(members)
    index = json.loads(members["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"] == {
        "io.containerd.image.name": test_image,
        ANN_REF: "latest",
    }
    assert json.loads(members["manifest.json"])[0]["RepoTags"] == ["ctrexec-test:latest"]
    mine = lookup.get_image(client, test_image)
    peer = f"cx-arch-ctr-{secrets.token_hex(4)}"
    try:
        _ctr(containerd_address, peer, "images", "import", str(archive))
        theirs = lookup.get_image(client.with_namespace(peer), test_image)
        assert theirs.target.digest == mine.target.digest
        assert images.is_unpacked(client.with_namespace(peer), theirs, SNAPSHOTTER)
    finally:
        _ctr(containerd_address, peer, "images", "rm", "--sync", test_image)
        _ctr(containerd_address, "default", "namespaces", "remove", peer)


def test_ctr_export_is_read_by_ctrexec_from_stdin(
    cli: Cli, ns: Client, test_image: str, tmp_path: Path, containerd_address: str
) -> None:
    archive = tmp_path / "ctr.tar"
    _ctr(containerd_address, TEST_NAMESPACE, "images", "export", str(archive), test_image)
    out = _import(cli, ns, "-", stdin=archive.read_bytes())
    assert out.returncode == 0, out.stderr
    image = lookup.get_image(ns, test_image)
    assert images.is_unpacked(ns, image, SNAPSHOTTER)
    assert ns.leases() == []


def test_export_to_stdout_round_trips_through_stdin(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    marker = secrets.token_hex(6)
    name = f"docker.io/library/cx-pipe-{marker}:v1"
    digests = build_oci_variant(test_image_archive, tmp_path / "v.tar", name, marker)
    assert _import(cli, ns, "-q", str(tmp_path / "v.tar")).returncode == 0
    exported = subprocess.run(
        cli.argv("export", name, "-", namespace=ns.namespace),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout[:512].startswith(b"blobs/") or b"blobs/" in exported.stdout[:1024]
    remove_image(ns, name, force=True, sync=True)
    until(
        lambda: not content.exists(ns, str(digests["layer2"])), "the marker layer to be collected"
    )
    back = _import(cli, ns, "-", stdin=exported.stdout)
    assert back.returncode == 0, back.stderr
    image = lookup.get_image(ns, name)
    assert image.manifest.digest == digests["manifest"]
    assert images.read_rootfs_files(ns, image, ["/etc/marker"])["/etc/marker"] == marker.encode()


# -- bad input ----------------------------------------------------------------------------------


def _refused(out: subprocess.CompletedProcess[bytes], words: str, code: int = 125) -> None:
    err = out.stderr.decode()
    assert out.returncode == code, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("ctrexec: ") and words in err, err
    assert "Traceback" not in err


def _bad_archives(archive: Path, tmp: Path, marker: str) -> list[tuple[str, bytes, str]]:
    name = f"docker.io/library/cx-bad-{marker}:v1"
    cases = [("garbage", os.urandom(4096), "not a tar archive")]
    cases.append(("no layout", _tar_bytes({"hello.txt": b"hi"}), "not an image archive"))
    cases.append(
        ("no index", _tar_bytes({"oci-layout": b'{"imageLayoutVersion":"1.0.0"}'}), "no index.json")
    )
    build_oci_variant(archive, tmp / "c.tar", name, marker, corrupt=True)
    cases.append(("corrupt", (tmp / "c.tar").read_bytes(), "do not match the digest"))
    build_oci_variant(archive, tmp / "d.tar", name, marker, drop="config")
    cases.append(("missing blob", (tmp / "d.tar").read_bytes(), "archive lacks"))
    build_oci_variant(archive, tmp / "t.tar", name, marker)
    whole = (tmp / "t.tar").read_bytes()
    cases.append(("truncated", whole[: len(whole) - 1024 - 128 * 1024], "truncated or corrupt"))
    return cases


def test_bad_archives_are_one_line_and_leave_nothing(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    marker = secrets.token_hex(6)
    for what, data, words in _bad_archives(test_image_archive, tmp_path, marker):
        path = tmp_path / "bad.tar"
        path.write_bytes(data)
        _refused(_import(cli, ns, "-q", str(path)), words)
        _refused(_import(cli, ns, "-q", "-", stdin=data), words)
        assert _empty(ns) == [], what
        assert _snapshots(ns) == set(), what
    _refused(_import(cli, ns, "-q", str(tmp_path / "absent.tar")), "cannot read")


def test_export_of_an_unknown_ref_writes_nothing(cli: Cli, test_image: str, tmp_path: Path) -> None:
    dest = tmp_path / "out.tar"
    out = subprocess.run(
        cli.argv("export", test_image, "no-such-image:v9", str(dest)),
        capture_output=True,
        check=False,
    )
    _refused(out, "no-such-image")
    assert list(tmp_path.iterdir()) == []


# -- prune and usage ------------------------------------------------------------------------------


def _container(ns: Client, image: str) -> str:
    cid = f"cx-prune-{secrets.token_hex(4)}"
    containers.create(
        ns,
        cid,
        image=image,
        spec={"ociVersion": "1.0.2"},
        snapshotter=SNAPSHOTTER,
        snapshot_key=cid,
        runtime=containers.Runtime("io.containerd.runc.v2"),
        labels={},
    )
    return cid


def _name_again(ns: Client, name: str, image: images.Image) -> None:
    """Another record for the image's target, as ``docker tag`` makes one."""
    with ns.lease() as le:
        images.record_image(ns, name, image.target, lease=le.id)


def test_a_record_named_outside_the_grammar(cli: Cli, ns: Client, test_image_archive: Path) -> None:
    """containerd/images takes a stored name as it is: a record another client named
    outside docker's grammar is read by that name, is dangling, and prune deletes it
    (when every name was parsed first, prune stopped at it with InvalidArgument)."""
    assert _import(cli, ns, "-q", str(test_image_archive)).returncode == 0
    test_name = "docker.io/library/ctrexec-test:latest"
    plain = lookup.get_image(ns, test_name)
    odd = f"CX Raw {secrets.token_hex(4)}"
    _name_again(ns, odd, plain)
    assert images.get_image(ns, odd).config_digest == plain.config_digest
    with pytest.raises(errors.InvalidArgument, match="invalid reference format"):
        lookup.get_image(ns, odd)  # not a reference a user may type
    report = prune_images(ns)
    assert report.deleted == (odd,)
    assert report.reclaimed == 0  # the tag still holds the content
    assert {i.name for i in images.list_images(ns)} == {test_name}


def test_prune_and_usage(cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path) -> None:
    marker = secrets.token_hex(6)
    used = f"docker.io/library/cx-used-{marker}:v1"
    build_docker_save(test_image_archive, tmp_path / "d.tar", used, marker)
    assert _import(cli, ns, "-q", str(tmp_path / "d.tar")).returncode == 0
    assert _import(cli, ns, "-q", str(test_image_archive)).returncode == 0
    test_name = "docker.io/library/ctrexec-test:latest"
    plain = lookup.get_image(ns, test_name)
    dangling = f"docker.io/library/cx-none-{marker}@{plain.target.digest}"
    _name_again(ns, dangling, plain)
    cid = _container(ns, used)
    try:
        listed = json.loads(cli("images", "--json", namespace=ns.namespace, check=True).stdout)
        assert {i["name"]: i["containers"] for i in listed} == {used: 1, test_name: 0, dangling: 0}
        table = cli("images", namespace=ns.namespace, check=True).stdout.splitlines()
        assert table[0].split()[-1] == "CONTAINERS"

        out = cli("image prune", "--json", namespace=ns.namespace, check=True)
        assert json.loads(out.stdout)["deleted"] == [dangling]
        assert {i.name for i in images.list_images(ns)} == {used, test_name}
        assert content.exists(ns, plain.manifest.digest)  # the tag still holds it

        out = cli("image prune", "--all", namespace=ns.namespace, check=True)
        assert out.stdout.splitlines()[0] == f"Deleted: {test_name}"
        assert {i.name for i in images.list_images(ns)} == {used}
        for blob in (plain.manifest.digest, plain.config_digest, plain.layers[0].digest):
            until(lambda b=blob: not content.exists(ns, b), f"{blob} to be collected")
    finally:
        containers.delete(ns, cid)
    image = lookup.get_image(ns, used)
    assert {image.top_chain_id, image.chain_ids[0]} <= _snapshots(ns)
    from ctrexec import prune_images

    report = prune_images(ns, all_images=True)
    assert report.deleted == (used,)
    assert report.reclaimed > 256 * 1024
    until(lambda: not _snapshots(ns), "the pruned image's snapshots to go")
    until(lambda: not content_digests(ns), "the pruned image's content to go")


# -- platforms -----------------------------------------------------------------------------------


def _index_archive(tmp_path: Path, name: str) -> dict[str, str]:
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[2] / "scripts" / "build-test-image"),
            "--out",
            str(tmp_path / "index.tar"),
            "--name",
            name,
            "--platform-index",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    summary: dict[str, str] = json.loads(out.stdout)
    return summary


def test_import_keeps_the_host_platform_unless_all_are_asked_for(
    cli: Cli, ns: Client, tmp_path: Path
) -> None:
    name = f"docker.io/library/cx-multi-{secrets.token_hex(4)}:v1"
    summary = _index_archive(tmp_path, name)
    archive = str(tmp_path / "index.tar")
    index, other = summary["image_index"], summary["other_manifest"]

    assert _import(cli, ns, "-q", archive).returncode == 0
    labels = content.info(ns, index).labels
    assert labels == {f"{content.GC_REF_CONTENT}m.0": summary["manifest"]}
    _gc(ns)
    assert not content.exists(ns, other)  # unreferenced: collected with the lease

    assert _import(cli, ns, "-q", "--all-platforms", archive).returncode == 0
    labels = content.info(ns, index).labels
    assert labels[f"{content.GC_REF_CONTENT}m.1"] == other
    _gc(ns)
    assert content.exists(ns, other)

    other_platform = "linux/arm64" if Platform.host().architecture == "amd64" else "linux/amd64"
    out = _import(cli, ns, "-q", "--platform", other_platform, archive)
    assert out.returncode == 0, out.stderr
    theirs = lookup.get_image(ns, name, platform=other_platform)
    got = images.read_rootfs_files(ns, theirs, ["/etc/ctrexec-platform"])
    assert got["/etc/ctrexec-platform"] == f"{theirs.platform.architecture}\n".encode()
    assert theirs.manifest.digest == other


# -- images by ID, and docker's listing ----------------------------------------------------------


def _labelled_config(base: dict[str, object], marker: str) -> bytes:
    config = json.loads(json.dumps(base))
    config["config"]["Labels"] = {"io.ctrexec.test.marker": marker}
    return json.dumps(config).encode()


def build_labelled(archive: Path, out: Path, names: list[str], marker: str) -> str:
    """The test image with one label more (its layer unchanged): another image ID, named
    ``names`` in an OCI layout. Returns that ID (the config digest)."""
    base, layer_gz, _ = _test_image_parts(archive)
    config = _labelled_config(base, marker)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": content.MT_OCI_MANIFEST,
            "config": _desc(content.MT_OCI_CONFIG, config),
            "layers": [_desc(content.MT_OCI_LAYER_GZIP, layer_gz)],
        }
    ).encode()
    tops = [
        {**_desc(content.MT_OCI_MANIFEST, manifest), "annotations": {ANN_IMAGE_NAME: n}}
        for n in names
    ]
    files = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps({"schemaVersion": 2, "manifests": tops}).encode(),
        _blob(manifest): manifest,
        _blob(config): config,
        _blob(layer_gz): layer_gz,
    }
    out.write_bytes(_tar_bytes(files))
    return _sha(config)


def _marker_for_id_starting(archive: Path, first: str) -> str:
    """A marker whose labelled image's ID begins with ``first`` (one in 16 does)."""
    base = _test_image_parts(archive)[0]
    for n in range(100_000):
        if _sha(_labelled_config(base, f"m{n}"))[7:].startswith(first):
            return f"m{n}"
    raise AssertionError(f"no marker gives an ID starting {first}")


def _table(out: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line) for line in out.splitlines()]


def test_images_lists_as_docker_does(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    assert _import(cli, ns, "-q", str(test_image_archive)).returncode == 0
    test_id = lookup.get_image(ns, "docker.io/library/ctrexec-test:latest").config_digest
    names = ["docker.io/library/cx-ids:v1", "docker.io/library/cx-ids:v2"]
    ids = build_labelled(test_image_archive, tmp_path / "v.tar", names, secrets.token_hex(4))
    assert _import(cli, ns, "-q", str(tmp_path / "v.tar")).returncode == 0

    def listed(*args: str) -> str:
        out = cli("images", *args, namespace=ns.namespace)
        assert out.returncode == 0, out.stderr
        return out.stdout

    table = _table(listed())
    assert table[0] == ["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE", "CONTAINERS"]
    rows = {(r[0], r[1]): r[2:] for r in table[1:]}
    assert set(rows) == {("ctrexec-test", "latest"), ("cx-ids", "v1"), ("cx-ids", "v2")}
    image_id, created, size, used = rows[("cx-ids", "v2")]
    assert (image_id, used) == (ids[7:19], "0")
    assert re.fullmatch(r"\d+ years ago", created), created  # the test image's config: 1970
    assert re.fullmatch(r"\d+(\.\d+)?[kM]B", size), size
    assert rows[("ctrexec-test", "latest")][0] == test_id[7:19]
    quiet = listed("-q").split()
    assert sorted(quiet) == sorted([ids[7:19], test_id[7:19]])  # two tags, one ID
    assert sorted(listed("-q", "--no-trunc").split()) == sorted([ids, test_id])
    assert [r[:2] for r in _table(listed("cx-ids"))[1:]] == [["cx-ids", "v1"], ["cx-ids", "v2"]]
    assert [r[:2] for r in _table(listed("cx-ids:v2"))[1:]] == [["cx-ids", "v2"]]
    assert _table(listed("cx-nosuch")) == [table[0]]
    digests = _table(listed("--digests", "ctrexec-test"))
    assert digests[0][2] == "DIGEST"
    target = lookup.get_image(ns, "docker.io/library/ctrexec-test:latest").digest
    assert digests[1][2:4] == [target, test_id[7:19]]


def test_run_create_and_rmi_take_an_image_id_prefix(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    assert _import(cli, ns, "-q", str(test_image_archive)).returncode == 0
    test_id = lookup.get_image(ns, "docker.io/library/ctrexec-test:latest").config_digest
    first = test_id[7]
    names = [f"docker.io/library/cx-idp:{t}" for t in ("v1", "v2")]
    marker = _marker_for_id_starting(test_image_archive, first)
    ids = build_labelled(test_image_archive, tmp_path / "v.tar", names, marker)
    assert _import(cli, ns, "-q", str(tmp_path / "v.tar")).returncode == 0
    short = ids[7:19]
    hexname = f"docker.io/library/{short[:6]}:latest"  # a name that is also an ID prefix
    build_labelled(test_image_archive, tmp_path / "n.tar", [hexname], secrets.token_hex(4))
    assert _import(cli, ns, "-q", str(tmp_path / "n.tar")).returncode == 0

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(*args, namespace=ns.namespace)

    hi = run("run", "--rm", short, "echo", "hi")
    assert (hi.returncode, hi.stdout) == (0, "hi\n"), hi.stderr
    for given, name in ((f"sha256:{short}", names[0]), (short[:6], short[:6])):  # name wins
        made = run("create", "--name", "cx-idp-c", given, "true")
        assert made.returncode == 0, made.stderr
        assert run("inspect", "-f", "{{.Config.Image}}", "cx-idp-c").stdout == f"{name}\n", given
        assert run("rm", "cx-idp-c").returncode == 0
    for argv, code in ((("run", "--rm", first, "true"), 125), (("rmi", first), 1)):
        out = run(*argv)
        refusal = f"ctrexec: multiple IDs found with provided prefix: {first}\n"
        assert (out.returncode, out.stderr) == (code, refusal), argv

    other = "docker.io/library/cx-idp-other:v1"
    _name_again(ns, other, lookup.get_image(ns, names[0]))  # a third, in another repository
    out = run("rmi", short)
    assert (out.returncode, out.stderr) == (
        1,
        f"ctrexec: conflict: unable to delete {short} (must be forced) - "
        "image is referenced in multiple repositories\n",
    )
    forced = run("rmi", "-f", short)
    assert (forced.returncode, forced.stdout) == (0, f"{short}\n"), forced.stderr
    left = {i.name for i in images.list_images(ns)}
    assert left == {"docker.io/library/ctrexec-test:latest", hexname}


def test_prune_takes_dockers_force_flag(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    name = "docker.io/library/cx-force:v1"
    build_labelled(test_image_archive, tmp_path / "f.tar", [name], secrets.token_hex(4))
    assert _import(cli, ns, "-q", str(tmp_path / "f.tar")).returncode == 0
    out = cli("image prune", "-f", namespace=ns.namespace)
    assert (out.returncode, out.stdout) == (0, "Total reclaimed space: 0B\n"), out.stderr
    out = cli("image prune", "--all", "--force", namespace=ns.namespace)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"Deleted: {name}"


def test_import_that_moves_a_name_says_so(
    cli: Cli, ns: Client, test_image_archive: Path, tmp_path: Path
) -> None:
    name = "docker.io/library/cx-move:v1"
    old = build_labelled(test_image_archive, tmp_path / "a.tar", [name], secrets.token_hex(4))
    new = build_labelled(test_image_archive, tmp_path / "b.tar", [name], secrets.token_hex(4))
    first = _import(cli, ns, str(tmp_path / "a.tar"))
    assert first.returncode == 0 and b"already existed" not in first.stdout, first.stdout
    moved = _import(cli, ns, str(tmp_path / "b.tar"))
    assert moved.returncode == 0, moved.stderr
    lines = moved.stdout.decode().splitlines()
    assert lines[0] == (
        f"The image {name} already existed; the name now points to the imported image, "
        f"not to ID {old}"
    )
    assert lines[1].startswith(f"Loaded image: {name} (")
    assert lookup.get_image(ns, name).config_digest == new
    again = _import(cli, ns, str(tmp_path / "b.tar"))
    assert again.returncode == 0 and b"already existed" not in again.stdout, again.stdout
