"""The pure side of image archives: member names, layouts, names, docker conversion."""

from __future__ import annotations

import json

import pytest

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.containerd.content import Descriptor
from ctrexec.images import archives

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64


@pytest.mark.parametrize(
    ("name", "path"),
    [("./index.json", "index.json"), ("blobs//sha256/ab", "blobs/sha256/ab"), ("a/./b", "a/b")],
)
def test_member_path_is_clean_and_relative(name: str, path: str) -> None:
    assert archives.member_path(name) == path


def test_symlink_target_is_relative_to_the_link() -> None:
    assert archives.symlink_target("./b/layer.tar", "../a/layer.tar") == "a/layer.tar"


def test_blob_digest_only_for_valid_blob_paths() -> None:
    assert archives.blob_digest("blobs/sha256/" + "1" * 64) == D1
    assert archives.blob_digest("blobs/sha256/xyz") is None
    assert archives.blob_digest("blobs/md5/" + "1" * 32) is None
    assert archives.blob_digest("other/sha256/" + "1" * 64) is None


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("index.json", "metadata"),
        ("manifest.json", "metadata"),
        ("oci-layout", "metadata"),
        ("repositories", "metadata"),
        ("blobs/sha256/" + "1" * 64, "blob"),
        ("abc/layer.tar", "file"),
        ("abc.json", "file"),
        ("abc/json", "skip"),
        ("abc/VERSION", "skip"),
    ],
)
def test_member_kind(path: str, kind: str) -> None:
    assert archives.member_kind(path) == kind


def test_layer_media_type_from_magic() -> None:
    assert archives.layer_media_type(b"\x1f\x8b\x08\x00") == content.MT_DOCKER_LAYER_GZIP
    assert archives.layer_media_type(b"\x28\xb5\x2f\xfd") == content.MT_OCI_LAYER_ZSTD
    assert archives.layer_media_type(b"etc/\x00\x00") == content.MT_DOCKER_LAYER
    assert archives.layer_media_type(b"") == content.MT_DOCKER_LAYER


def test_check_layout_prefers_oci_and_refuses_the_rest() -> None:
    layout = archives.layout_json()
    assert archives.check_layout({"oci-layout": layout, "index.json": b"{}"}) == "oci"
    both = {"oci-layout": layout, "index.json": b"{}", "manifest.json": b"[]"}
    assert archives.check_layout(both) == "oci"
    assert archives.check_layout({"manifest.json": b"[]"}) == "docker"
    with pytest.raises(errors.InvalidArgument, match=r"no index\.json"):
        archives.check_layout({"oci-layout": layout})
    with pytest.raises(errors.InvalidArgument, match="not an image archive"):
        archives.check_layout({"repositories": b"{}"})
    with pytest.raises(errors.InvalidArgument, match="layout version"):
        archives.check_layout({"oci-layout": b'{"imageLayoutVersion":"9"}', "index.json": b"{}"})


def _entry(**annotations: str) -> Descriptor:
    return Descriptor(content.MT_OCI_MANIFEST, D1, 10, annotations)


def test_entry_name_as_ctr_reads_it() -> None:
    full = _entry(**{archives.ANN_IMAGE_NAME: "busybox:1", archives.ANN_REF_NAME: "1"})
    assert archives.entry_name(full) == "docker.io/library/busybox:1"
    assert archives.entry_name(_entry(**{archives.ANN_REF_NAME: "quay.io/a/b:v2"})) == (
        "quay.io/a/b:v2"
    )
    tag_only = _entry(**{archives.ANN_REF_NAME: "v3"})
    assert archives.entry_name(tag_only, "example.com/app") == "example.com/app:v3"
    with pytest.raises(errors.InvalidArgument, match="--base-name"):
        archives.entry_name(tag_only)
    assert archives.entry_name(_entry()) is None
    with pytest.raises(errors.InvalidArgument, match="archive entry"):
        archives.entry_name(_entry(**{archives.ANN_IMAGE_NAME: "Bad:Name"}))


def test_oci_images_merges_names_and_skips_unnamed() -> None:
    def desc(digest: str, name: str | None) -> dict[str, object]:
        out: dict[str, object] = {"mediaType": content.MT_OCI_MANIFEST, "digest": digest}
        out["size"] = 5
        if name:
            out["annotations"] = {archives.ANN_IMAGE_NAME: name}
        return out

    index = {"schemaVersion": 2, "manifests": [desc(D1, "a:1"), desc(D1, "a:2"), desc(D2, None)]}
    found = archives.oci_images(json.dumps(index).encode())
    assert len(found) == 1
    assert found[0].target == Descriptor(content.MT_OCI_MANIFEST, D1, 5)
    assert found[0].names == ("docker.io/library/a:1", "docker.io/library/a:2")
    with pytest.raises(errors.InvalidArgument, match="manifests list"):
        archives.oci_images(b'{"schemaVersion":2}')


def test_docker_manifest_is_containerds_schema2_byte_for_byte() -> None:
    config = Descriptor("", D1, 100)
    layers = [
        Descriptor(content.MT_DOCKER_LAYER, D2, 2048),
        Descriptor(content.MT_DOCKER_LAYER_GZIP, D3, 30),
    ]
    expected = (
        '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",'
        f'"config":{{"mediaType":"application/vnd.docker.container.image.v1+json",'
        f'"digest":"{D1}","size":100}},"layers":['
        f'{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar","digest":"{D2}",'
        '"size":2048},'
        f'{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","digest":"{D3}",'
        '"size":30}]}'
    )
    assert archives.docker_manifest(config, layers).decode() == expected


def test_docker_entries_names_and_paths() -> None:
    doc = [{"Config": "./c.json", "RepoTags": ["app:v1", "app:v1"], "Layers": ["x/layer.tar"]}]
    (entry,) = archives.docker_entries(json.dumps(doc).encode())
    assert entry == archives.DockerEntry("c.json", ("x/layer.tar",), ("app:v1", "app:v1"))
    assert archives.docker_names(entry) == ("docker.io/library/app:v1",)
    untagged = archives.docker_entries(b'[{"Config":"c.json","RepoTags":null,"Layers":[]}]')
    assert archives.docker_names(untagged[0]) == ()
    for bad in (b"{}", b"[{}]", b'[{"Config":"c","Layers":"x"}]', b"nope"):
        with pytest.raises(errors.InvalidArgument, match=r"manifest\.json"):
            archives.docker_entries(bad)


def test_resolve_member_follows_symlinks() -> None:
    stored = {"a/layer.tar": Descriptor("", D1, 1)}
    links = {"b/layer.tar": "c/layer.tar", "c/layer.tar": "a/layer.tar"}
    assert archives.resolve_member("b/layer.tar", stored, links).digest == D1
    with pytest.raises(errors.InvalidArgument, match="lacks"):
        archives.resolve_member("d/layer.tar", stored, links)
    with pytest.raises(errors.InvalidArgument, match="lacks"):
        archives.resolve_member("x", stored, {"x": "y", "y": "x"})


def test_export_documents() -> None:
    target = Descriptor(content.MT_OCI_INDEX, D1, 9)
    index = json.loads(
        archives.index_json([(target, "docker.io/library/a:v1"), (target, "quay.io/b@" + D2)])
    )
    assert index["schemaVersion"] == 2
    anns = [m["annotations"] for m in index["manifests"]]
    assert anns == [
        {archives.ANN_IMAGE_NAME: "docker.io/library/a:v1", archives.ANN_REF_NAME: "v1"},
        {archives.ANN_IMAGE_NAME: "quay.io/b@" + D2, archives.ANN_REF_NAME: D2},
    ]
    config, layer = Descriptor("", D2, 1), Descriptor("", D3, 2)
    docker = json.loads(
        archives.docker_manifest_json(
            [(config, [layer], ["docker.io/library/a:v1", "docker.io/library/a@" + D1])]
        )
    )
    assert docker == [
        {
            "Config": "blobs/sha256/" + "2" * 64,
            "RepoTags": ["a:v1"],
            "Layers": ["blobs/sha256/" + "3" * 64],
        }
    ]
    assert json.loads(archives.layout_json()) == {"imageLayoutVersion": "1.0.0"}


# -- the CLI's parsing (no daemon: each refusal comes before the connection) ------------


def test_cli_export_takes_refs_then_the_file() -> None:
    from ctrexec.cli.main import build_parser

    args = build_parser().parse_args(["export", "a", "b:v2", "out.tar"])
    assert (args.refs, args.file) == (["a", "b:v2"], "out.tar")
    args = build_parser().parse_args(["image", "prune", "-a", "--json"])
    assert (args.all, args.json) == (True, True)


def test_cli_refuses_platform_with_all_platforms(capsys: pytest.CaptureFixture[str]) -> None:
    from ctrexec.cli.main import main

    for verb in (["import"], ["export", "ref"]):
        argv = [*verb, "--platform", "linux/amd64", "--all-platforms", "x.tar"]
        assert main(argv) == 125
        err = capsys.readouterr().err
        assert err.startswith("ctrexec: ") and "exclude each other" in err
        assert len(err.strip().splitlines()) == 1
