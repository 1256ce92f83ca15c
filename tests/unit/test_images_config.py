"""Image documents: configs, manifests, media types, chain IDs, GC labels."""

from __future__ import annotations

import json

import pytest

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.containerd.content import Descriptor, Platform
from ctrexec.containerd.images import ImageConfig, parse_config_blob
from ctrexec.containerd.snapshots import chain_ids

A = "sha256:c6f988f4874bb0add23a778f753c65efe992244e148a1d2ec2a8b664fb66bbd1"
B = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
C = "sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"


def test_chain_ids_known_example() -> None:
    # chain[1] = sha256("<A> <B>"), chain[2] = sha256("<chain[1]> <C>")
    assert chain_ids([]) == ()
    assert chain_ids([A]) == (A,)
    assert chain_ids([A, B, C]) == (
        A,
        "sha256:c3191d32a37d7159b2e30830937d2e30268ad6c375a773a8994911a3aba9b93f",
        "sha256:5746d8988d25982d8b8e4e833a7bbd084707c7a86356bb6f8c5e9843ec144393",
    )


def test_full_config() -> None:
    blob = {
        "architecture": "arm64",
        "variant": "v8",
        "os": "linux",
        "created": "2023-05-19T20:19:17.123456789Z",
        "config": {
            "Entrypoint": ["/docker-entrypoint.sh"],
            "Cmd": ["nginx", "-g", "daemon off;"],
            "Env": ["PATH=/usr/bin", "A=b=c"],
            "WorkingDir": "/srv",
            "User": "101:101",
            "StopSignal": "SIGQUIT",
            "ExposedPorts": {"80/tcp": {}, "443/tcp": {}},
            "Labels": {"maintainer": "x"},
            "Volumes": {"/var/cache": {}},
            "ArgsEscaped": True,
            "Healthcheck": {"Test": ["CMD", "true"]},
        },
        "rootfs": {"type": "layers", "diff_ids": [A, B]},
    }
    parsed = parse_config_blob(json.dumps(blob).encode())
    assert parsed.config == ImageConfig(
        entrypoint=("/docker-entrypoint.sh",),
        cmd=("nginx", "-g", "daemon off;"),
        env=("PATH=/usr/bin", "A=b=c"),
        working_dir="/srv",
        user="101:101",
        stop_signal="SIGQUIT",
        exposed_ports=("443/tcp", "80/tcp"),
        labels={"maintainer": "x"},
        volumes=("/var/cache",),
    )
    assert parsed.platform == Platform("linux", "arm64")
    assert parsed.diff_ids == (A, B)
    assert parsed.created is not None
    assert parsed.created.year == 2023


def test_missing_and_null_fields() -> None:
    parsed = parse_config_blob(b'{"rootfs": {"diff_ids": []}}')
    assert parsed.config == ImageConfig()
    assert parsed.platform is None
    assert parsed.diff_ids == ()
    assert parsed.created is None
    nulls = {"config": {"Entrypoint": None, "Cmd": None, "Env": None, "Labels": None}}
    assert parse_config_blob(json.dumps(nulls).encode()).config == ImageConfig()
    assert parse_config_blob(b'{"config": null, "created": "yesterday"}').created is None


@pytest.mark.parametrize(
    "blob",
    [
        b"not json",
        b"[]",
        b'{"config": {"Cmd": "sh"}}',
        b'{"config": {"Env": [1]}}',
        b'{"config": {"Labels": {"a": 1}}}',
        b'{"config": {"User": 0}}',
        b'{"config": {"ExposedPorts": ["80/tcp"]}}',
        b'{"config": []}',
        b'{"rootfs": {"diff_ids": ["sha256:short"]}}',
    ],
)
def test_invalid_config(blob: bytes) -> None:
    with pytest.raises(errors.InvalidArgument):
        parse_config_blob(blob)


def _desc(mt: str, n: int) -> dict[str, object]:
    return {"mediaType": mt, "digest": "sha256:" + f"{n:064x}", "size": n}


def test_manifest_and_child_labels() -> None:
    manifest = {
        "schemaVersion": 2,
        "mediaType": content.MT_DOCKER_MANIFEST,
        "config": _desc(content.MT_DOCKER_CONFIG, 1),
        "layers": [_desc(content.MT_DOCKER_LAYER_GZIP, 2), _desc(content.MT_OCI_LAYER_ZSTD, 3)],
    }
    config, layers = content.parse_manifest(manifest)
    assert config == Descriptor(content.MT_DOCKER_CONFIG, "sha256:" + f"{1:064x}", 1)
    assert [d.size for d in layers] == [2, 3]
    assert content.content_kind(content.MT_DOCKER_MANIFEST, manifest) == "manifest"
    assert content.child_labels("manifest", manifest) == {
        "containerd.io/gc.ref.content.config": config.digest,
        "containerd.io/gc.ref.content.l.0": layers[0].digest,
        "containerd.io/gc.ref.content.l.1": layers[1].digest,
    }
    index = {"manifests": [_desc(content.MT_OCI_MANIFEST, 4), _desc(content.MT_OCI_MANIFEST, 5)]}
    assert content.content_kind(content.MT_OCI_INDEX, index) == "index"
    assert content.content_kind("", index) == "index"  # no media type: told by shape
    assert content.child_labels("index", index) == {
        "containerd.io/gc.ref.content.m.0": "sha256:" + f"{4:064x}",
        "containerd.io/gc.ref.content.m.1": "sha256:" + f"{5:064x}",
    }


def test_not_an_image() -> None:
    artifact = {"config": _desc("application/vnd.cncf.helm.config.v1+json", 1), "layers": []}
    with pytest.raises(errors.InvalidArgument, match="not a container image"):
        content.parse_manifest(artifact)
    with pytest.raises(errors.InvalidArgument, match="schema 1"):
        content.content_kind(content.MT_DOCKER_MANIFEST_V1, {"schemaVersion": 1})
    with pytest.raises(errors.InvalidArgument):  # says manifest, is an index
        content.content_kind(content.MT_OCI_MANIFEST, {"manifests": []})
    with pytest.raises(errors.InvalidArgument):
        content.content_kind("application/json", {"hello": 1})


def test_media_types() -> None:
    assert content.is_index(content.MT_DOCKER_MANIFEST_LIST)
    assert content.is_index(content.MT_OCI_INDEX)
    assert content.is_manifest(content.MT_DOCKER_MANIFEST)
    assert not content.is_manifest(content.MT_DOCKER_MANIFEST_LIST)
    assert content.is_config(content.MT_DOCKER_CONFIG)
    assert content.layer_compression(content.MT_DOCKER_LAYER_FOREIGN) == "gzip"
    assert content.layer_compression(content.MT_DOCKER_LAYER_GZIP) == "gzip"
    assert content.layer_compression(content.MT_OCI_LAYER_GZIP) == "gzip"
    assert content.layer_compression(content.MT_OCI_LAYER_ZSTD) == "zstd"
    assert content.layer_compression(content.MT_OCI_LAYER) == ""
    assert content.layer_compression(content.MT_DOCKER_LAYER) == ""
    with pytest.raises(errors.InvalidArgument):
        content.layer_compression("application/vnd.oci.image.layer.v1.tar+gzip+encrypted")


def test_descriptor_round_trip_and_validation() -> None:
    d = Descriptor.from_json({**_desc(content.MT_OCI_MANIFEST, 7), "annotations": {"a": "b"}})
    assert Descriptor.from_proto(d.to_proto()) == d
    for bad in (
        {"digest": "sha256:" + "0" * 64, "size": -1},
        {"digest": "sha256:" + "0" * 64, "size": True},
        {"digest": "sha256:xyz", "size": 1},
        {"digest": "sha256:" + "0" * 64 + "\n", "size": 1},
        {"digest": "sha256:" + "0" * 64, "size": 1, "annotations": {"a": 1}},
        "nope",
    ):
        with pytest.raises(errors.InvalidArgument):
            Descriptor.from_json(bad)
