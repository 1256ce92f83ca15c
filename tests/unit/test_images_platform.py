"""Platform normalization and selection from an index or docker manifest list."""

from __future__ import annotations

import platform
from typing import Any

import pytest

from ctrexec import errors
from ctrexec.containerd import content
from ctrexec.containerd.content import Platform, compatible_platforms, select_manifests


def _d(n: int) -> str:
    return "sha256:" + f"{n:064x}"


def _entry(
    n: int, platform: dict[str, str] | None, mt: str = content.MT_OCI_MANIFEST
) -> dict[str, Any]:
    e: dict[str, Any] = {"mediaType": mt, "digest": _d(n), "size": 100 + n}
    if platform is not None:
        e["platform"] = platform
    return e


AMD64 = {"os": "linux", "architecture": "amd64"}
ARM64 = {"os": "linux", "architecture": "arm64", "variant": "v8"}
ARMV7 = {"os": "linux", "architecture": "arm", "variant": "v7"}
ARMV6 = {"os": "linux", "architecture": "arm", "variant": "v6"}
ATTEST = {"os": "unknown", "architecture": "unknown"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (("linux", "x86_64"), Platform("linux", "amd64")),
        (("Linux", "AMD64"), Platform("linux", "amd64")),
        (("linux", "amd64", "v1"), Platform("linux", "amd64")),
        (("linux", "aarch64"), Platform("linux", "arm64")),
        (("linux", "arm64", "v8"), Platform("linux", "arm64")),
        (("linux", "arm64", "8"), Platform("linux", "arm64")),
        (("linux", "arm"), Platform("linux", "arm", "v7")),
        (("linux", "arm", "6"), Platform("linux", "arm", "v6")),
        (("linux", "armhf"), Platform("linux", "arm", "v7")),
        (("linux", "armel"), Platform("linux", "arm", "v6")),
        (("linux", "i686"), Platform("linux", "386")),
    ],
)
def test_normalize(given: tuple[str, ...], expected: Platform) -> None:
    assert Platform.of(*given) == expected


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        ("x86_64", "linux/amd64"),
        ("aarch64", "linux/arm64"),
        ("armv7l", "linux/arm/v7"),
        ("armv6l", "linux/arm/v6"),
        ("ppc64le", "linux/ppc64le"),
        ("s390x", "linux/s390x"),
    ],
)
def test_host_mapping(monkeypatch: pytest.MonkeyPatch, machine: str, expected: str) -> None:
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert str(Platform.host()) == expected


def test_parse() -> None:
    assert Platform.parse("linux/arm/v7") == Platform("linux", "arm", "v7")
    assert Platform.parse("linux/arm64/v8") == Platform("linux", "arm64")
    assert Platform.parse("arm64") == Platform("linux", "arm64")
    for bad in ("", "a/b/c/d", "linux//amd64", "linux/amd 64"):
        with pytest.raises(errors.InvalidArgument):
            Platform.parse(bad)


def test_compatible() -> None:
    assert compatible_platforms(Platform("linux", "arm", "v7")) == [
        Platform("linux", "arm", "v7"),
        Platform("linux", "arm", "v6"),
        Platform("linux", "arm", "v5"),
    ]
    assert compatible_platforms(Platform("linux", "amd64")) == [Platform("linux", "amd64")]


def test_picks_host_entry_over_others() -> None:
    index = {"manifests": [_entry(1, ARM64), _entry(2, AMD64), _entry(3, ATTEST)]}
    picked = select_manifests(index, Platform("linux", "amd64"))
    assert [(d.digest, unchecked) for d, unchecked in picked] == [(_d(2), False)]
    picked = select_manifests(index, Platform("linux", "arm64"))
    assert [d.digest for d, _ in picked] == [_d(1)]


def test_arm_prefers_exact_variant_then_older() -> None:
    index = {"manifests": [_entry(1, ARMV6), _entry(2, ARMV7), _entry(3, AMD64)]}
    assert [d.digest for d, _ in select_manifests(index, Platform("linux", "arm", "v7"))] == [
        _d(2),
        _d(1),
    ]
    assert [d.digest for d, _ in select_manifests(index, Platform("linux", "arm", "v6"))] == [_d(1)]


def test_docker_manifest_list_and_unplatformed_entries() -> None:
    index = {
        "manifests": [
            _entry(1, None, content.MT_DOCKER_MANIFEST),
            _entry(2, AMD64, content.MT_DOCKER_MANIFEST),
            _entry(3, None, "application/vnd.in-toto+json"),  # not an image: skipped
            _entry(4, None, content.MT_OCI_INDEX),
        ]
    }
    picked = select_manifests(index, Platform("linux", "amd64"))
    # exact platform first, then entries whose config must be checked
    assert [(d.digest, u) for d, u in picked] == [(_d(2), False), (_d(1), True), (_d(4), True)]
    assert picked[0][0].media_type == content.MT_DOCKER_MANIFEST


def test_no_match_and_bad_index() -> None:
    assert select_manifests({"manifests": [_entry(1, ARM64)]}, Platform("linux", "amd64")) == []
    with pytest.raises(errors.InvalidArgument):
        select_manifests({}, Platform("linux", "amd64"))
    with pytest.raises(errors.InvalidArgument):
        select_manifests({"manifests": [{"digest": "nope", "size": 1}]}, Platform("linux", "amd64"))
