"""``images`` columns as docker prints them, without a daemon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ctrexec.cli.views import images as imagetable
from ctrexec.containerd.images import ImageSummary

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
CFG = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0B"), (512, "512B"), (1234, "1.23kB"), (4_200_000, "4.2MB"), (999_999, "1e+03kB"),
     (1_500_000_000, "1.5GB")],
)  # fmt: skip
def test_human_size_is_go_units(size: int, text: str) -> None:
    assert imagetable.human_size(size) == text


def test_repository_and_tag_columns() -> None:
    assert imagetable.repo_and_tag("docker.io/library/busybox:1.36") == ("busybox", "1.36")
    assert imagetable.repo_and_tag("docker.io/me/app:v1") == ("me/app", "v1")
    assert imagetable.repo_and_tag("localhost:5000/x:y") == ("localhost:5000/x", "y")
    digest = "sha256:" + "cd" * 32
    assert imagetable.repo_and_tag(f"docker.io/library/app@{digest}") == ("app", "<none>")
    assert imagetable.repo_and_tag("not a reference") == ("<none>", "<none>")


def _summary(name: str, *, config: str = CFG, built: datetime | None = None) -> ImageSummary:
    return ImageSummary(name, "sha256:" + "ef" * 32, 4_200_000, NOW, config, built)


def test_rows_ids_ages_and_quiet_ids() -> None:
    two_hours = NOW - timedelta(hours=2)
    found = [
        _summary("docker.io/library/a:v1", built=two_hours),
        _summary("docker.io/library/a:v2", built=two_hours),
        _summary("docker.io/library/b:latest", config=""),  # no readable config: the target's
    ]
    header, rows = imagetable.rows(found, {"docker.io/library/a:v1": 2}, now=NOW)
    assert header == ["REPOSITORY", "TAG", "IMAGE ID", "CREATED", "SIZE", "CONTAINERS"]
    assert rows[0] == ["a", "v1", "ab" * 6, "2 hours ago", "4.2MB", 2]
    assert rows[2][2:4] == ["ef" * 6, "Less than a second ago"]
    assert imagetable.quiet_ids(found) == ["ab" * 6, "ef" * 6]
    assert imagetable.quiet_ids(found, trunc=False) == [CFG, "sha256:" + "ef" * 32]
    header, rows = imagetable.rows(found[:1], {}, now=NOW, digests=True, trunc=False)
    assert header[2:4] == ["DIGEST", "IMAGE ID"]
    assert rows[0][2:4] == ["sha256:" + "ef" * 32, CFG]


def test_matching_and_order() -> None:
    old = _summary("docker.io/library/a:v1", built=NOW - timedelta(days=3))
    new = _summary("docker.io/library/a:v2", built=NOW - timedelta(hours=1))
    naive = _summary("docker.io/library/ab:x", built=datetime(2025, 1, 1))  # no zone in config
    found = [old, new, naive]
    assert imagetable.matching(found, "a") == [old, new]
    assert imagetable.matching(found, "a:v2") == [new]
    assert imagetable.matching(found, "docker.io/library/ab") == [naive]
    assert imagetable.matching(found, None) == found
    assert imagetable.newest_first(found) == [new, old, naive]
