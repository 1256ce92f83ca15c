"""The pure rules that refuse a hostile image archive (docs/security.md, "Archive import")."""

from __future__ import annotations

import pytest

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.images import archives


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "blobs/../../x", "a/.."])
def test_member_names_outside_the_archive_are_refused(name: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="points outside the archive"):
        archives.member_path(name)


@pytest.mark.parametrize(
    ("name", "target"),
    [("a/layer.tar", "../../etc/shadow"), ("layer.tar", "../x"), ("a/l", "/etc/shadow")],
)
def test_links_outside_the_archive_are_refused(name: str, target: str) -> None:
    with pytest.raises(errors.InvalidArgument, match="links outside the archive"):
        archives.symlink_target(name, target)
    with pytest.raises(errors.InvalidArgument):
        archives.hardlink_target(name, target)


def test_links_inside_the_archive_resolve() -> None:
    assert archives.symlink_target("b/layer.tar", "../a/layer.tar") == "a/layer.tar"
    assert archives.hardlink_target("b/layer.tar", "a/layer.tar") == "a/layer.tar"


def test_inflation_is_bounded_past_the_floor_only() -> None:
    # below the floor any ratio is fine (a small, very compressible archive)
    archives.Inflation(raw=1, out=archives.INFLATE_FLOOR).check()
    # past it, up to the ratio is fine; one byte more is a bomb
    ok = archives.Inflation(raw=archives.INFLATE_FLOOR, out=archives.INFLATE_FLOOR * 100)
    ok.check()
    ok.out += archives.INFLATE_RATIO * archives.INFLATE_FLOOR
    with pytest.raises(errors.InvalidArgument, match="decompression bomb"):
        ok.check()


def test_an_index_with_too_many_entries_is_refused() -> None:
    entry = {"mediaType": content.MT_OCI_MANIFEST, "digest": "sha256:" + "1" * 64, "size": 2}
    index = {"manifests": [entry] * (content.MAX_INDEX_ENTRIES + 1)}
    with pytest.raises(errors.ResourceExhausted, match="more than 1000"):
        content.index_entries(index, "index.json")
    with pytest.raises(errors.ResourceExhausted):
        archives.oci_images(content_json(index))
    assert len(content.index_entries({"manifests": [entry] * 3}, "x")) == 3


def content_json(obj: object) -> bytes:
    return archives.compact_json(obj)
