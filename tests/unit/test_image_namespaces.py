"""Which containerd namespaces ensure_image searches for an image this one lacks."""

from __future__ import annotations

from typing import Any, cast

import pytest

from ctrexec import errors
from ctrexec.containerd import images
from ctrexec.containerd.client import Client


class _Client:
    namespace = "ctrexec"

    def __init__(self, existing: list[str]) -> None:
        self.existing = existing
        self.asked = 0

    def namespaces(self) -> list[str]:
        self.asked += 1
        return self.existing


def _order(existing: list[str], given: list[str] | None = None) -> list[str]:
    return images._source_order(cast(Client, _Client(existing)), given)


EXISTING = ["zeta", "moby", "ctrexec", "k8s.io", "default"]


def test_docker_namespace_is_skipped_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(images.IMAGE_NAMESPACES_ENV, raising=False)
    assert _order(EXISTING) == ["default", "k8s.io", "zeta"]


def test_the_variable_is_the_list_in_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, " moby, default,gone,moby ,ctrexec")
    assert _order(EXISTING) == ["moby", "default"]  # missing, repeated and own ones drop
    monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "")
    fake: Any = _Client(EXISTING)
    assert images._source_order(fake, None) == []
    assert fake.asked == 0  # nothing to search: containerd is not asked
    monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "a/b")
    with pytest.raises(errors.InvalidArgument, match=r"namespace in \$CTREXEC_IMAGE_NAMESPACES"):
        _order(EXISTING)


def test_an_argument_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(images.IMAGE_NAMESPACES_ENV, "moby")
    assert _order(EXISTING, ["k8s.io"]) == ["k8s.io"]


def test_the_hint_is_the_pull_command() -> None:
    assert images.missing_image_hint("busybox") == "get it with: ctrexec pull busybox"
