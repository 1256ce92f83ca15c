"""The images concern: where the reference grammar lives, who may import whom, and the
one owner of "which containers use this image" (fakes for containerd's listings)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import _graph
import pytest

import ctrexec
from ctrexec import errors
from ctrexec.containerd import containers, content, images
from ctrexec.containerd.client import Client
from ctrexec.images import commit, lookup, prune, reference, usage

PKG = Path(ctrexec.__file__).parent


def test_containerd_never_imports_images() -> None:
    offenders = [
        f"{m}: {d}"
        for m, deps in _graph.graph().items()
        if m.startswith("ctrexec.containerd")
        for d in deps
        if d.startswith("ctrexec.images")
    ]
    assert offenders == []


def test_images_imports_only_what_is_below_it() -> None:
    allowed = ("ctrexec.containerd", "ctrexec.oci", "ctrexec.images", "ctrexec.labels")
    allowed += ("ctrexec.ids", "ctrexec.defaults", "ctrexec.errors", "ctrexec.paths")
    offenders = [
        f"{m}: {d}"
        for m, deps in _graph.graph().items()
        if m.startswith("ctrexec.images")
        for d in deps
        if not d.startswith(allowed)
    ]
    assert offenders == []  # no tasks/, net/, _rpc or _api


def test_reference_is_pure() -> None:
    assert _graph.graph()["ctrexec.images.reference"] == {"ctrexec.errors", "ctrexec.ids"}
    source = (PKG / "images" / "reference.py").read_text()
    assert "from ctrexec import errors, ids" in source


def test_public_names_come_from_their_one_owner() -> None:
    assert ctrexec.normalize_reference is reference.normalize_reference
    assert ctrexec.get_image is lookup.get_image
    assert ctrexec.ensure_image is lookup.ensure_image
    assert ctrexec.remove_image is usage.remove_image
    assert ctrexec.resolve_image is usage.resolve_image
    assert ctrexec.check_changes is commit.check_changes
    assert ctrexec.image_usage is usage.image_usage
    assert ctrexec.list_images is images.list_images


@pytest.mark.parametrize(
    ("name", "dangling"),
    [
        ("docker.io/library/busybox:latest", False),
        ("busybox", False),  # a reference without a tag gets :latest
        ("docker.io/library/busybox@sha256:" + "ab" * 32, True),
        ("Not A Reference", True),  # a record another client named
    ],
)
def test_is_dangling(name: str, dangling: bool) -> None:
    assert reference.is_dangling(name) is dangling


def test_a_users_reference_becomes_the_stored_name() -> None:
    digest = "sha256:" + "cd" * 32
    assert lookup.image_name("busybox") == images.ImageName(
        "docker.io/library/busybox:latest", "docker.io/library/busybox", "", given="busybox"
    )
    named = lookup.image_name(f"busybox@{digest}")
    assert (named.name, named.repository, named.digest) == (
        f"docker.io/library/busybox@{digest}",
        "docker.io/library/busybox",
        digest,
    )
    with pytest.raises(errors.InvalidArgument, match="invalid reference format"):
        lookup.image_name("Busybox")


# -- which containers use an image: one owner, asked by images, rmi and prune ---------------


def _container(cid: str, image: str) -> containers.Container:
    runtime = containers.Runtime("io.containerd.runc.v2")
    return containers.Container(cid, image, {}, {}, "overlayfs", cid, runtime, {}, None)


class _Store:
    """containerd's answers: containers and image records of one namespace."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.containers = [
            _container("b", "docker.io/library/app:v1"),
            _container("a", "docker.io/library/app:v1"),
            _container("c", "docker.io/library/db:latest"),
            _container("d", ""),  # a record with no image
        ]
        target = "sha256:" + "11" * 32
        self.records = {
            "docker.io/library/app:v1": target,
            "docker.io/library/app:old": target,  # another tag of what a container runs
            "docker.io/library/db:latest": "sha256:" + "22" * 32,
            "docker.io/library/tmp:latest": "sha256:" + "33" * 32,
            "Odd Name": "sha256:" + "44" * 32,  # no reference: dangling
        }
        self.removed: list[str] = []
        monkeypatch.setattr(containers, "list_containers", lambda client: list(self.containers))
        monkeypatch.setattr(images, "list_images", self._list)
        monkeypatch.setattr(images, "remove_image", self._remove)
        monkeypatch.setattr(images, "get_image", self._get)
        monkeypatch.setattr(images, "recorded_target", lambda client, n: self.records.get(n))
        monkeypatch.setattr(content, "exists", lambda client, digest: False)

    def _list(self, client: Any, **kw: Any) -> list[images.ImageSummary]:
        made = datetime(2026, 1, 1, tzinfo=UTC)
        return [images.ImageSummary(n, d, 1, made) for n, d in sorted(self.records.items())]

    def _remove(
        self, client: Any, name: str | images.ImageName, *, sync: bool = False, target: str = ""
    ) -> None:
        stored = name.name if isinstance(name, images.ImageName) else name
        if stored not in self.records:
            raise errors.NotFound(f"image {stored} not found")
        assert target == self.records[stored], "every removal names the target it resolved"
        del self.records[stored]
        self.removed.append(stored)

    def _get(self, client: Any, name: str | images.ImageName, **kw: Any) -> Any:
        stored = name.name if isinstance(name, images.ImageName) else name
        if stored not in self.records:
            raise errors.NotFound(f"image {stored} not found")
        raise errors.NotFound("no content in this fake")  # prune then counts no bytes


CLIENT = cast(Client, object())


def test_usage_lists_each_images_containers(monkeypatch: pytest.MonkeyPatch) -> None:
    _Store(monkeypatch)
    assert usage.containers_by_image(CLIENT) == {
        "docker.io/library/app:v1": ["a", "b"],
        "docker.io/library/db:latest": ["c"],
    }
    assert usage.image_usage(CLIENT) == {
        "docker.io/library/app:v1": 2,
        "docker.io/library/db:latest": 1,
    }


def test_rmi_and_prune_ask_the_same_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    store = _Store(monkeypatch)
    with pytest.raises(errors.Conflict, match="in use by container a, b"):
        usage.remove_image(CLIENT, "app:v1")
    with pytest.raises(errors.Conflict, match="in use by container c"):
        usage.remove_image(CLIENT, "db")
    store.containers.append(_container("e", "docker.io/library/tmp:latest"))
    report = prune.prune_images(CLIENT, all_images=True)
    # app:old shares app:v1's target; tmp gained a container; "Odd Name" is a stored
    # name that is no reference, removed as it is (never parsed)
    assert report.deleted == ("Odd Name",)
    assert store.removed == ["Odd Name"]
