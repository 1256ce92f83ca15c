"""The library's start path against the real containerd: round trips counted, caches
that survive what can change (an image removed, collected and imported again)."""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import TEST_NAMESPACE

from ctrexec import remove_image
from ctrexec.containerd import containers, snapshots
from ctrexec.containerd.client import Client
from ctrexec.images import lookup
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor
from ctrexec.testing import import_image

#: What one start_task of an image this Executor has seen costs: Images.Get (a tag
#: can move), Containers.Create, Snapshots.Prepare, Tasks.Create, Tasks.Start.
MAX_ROUND_TRIPS = 5
#: Calls that a warm start must not make any more.
REPEATED = ("Leases.", "Content.", "Snapshots.Stat", "Snapshots.Mounts", "Containers.Get")

NAMESPACE = f"{TEST_NAMESPACE}-startpath"


class Calls:
    def __init__(self) -> None:
        self.seen: collections.Counter[str] = collections.Counter()

    def __call__(self, method: str, seconds: float) -> None:
        self.seen[method] += 1


@pytest.fixture
def own_ns(
    client: Client, containerd_address: str, test_image_archive: Path, test_image: str
) -> Iterator[Client]:
    """A namespace of this module's own, so its image can be removed and collected."""
    import_image(containerd_address, NAMESPACE, test_image_archive)
    ns = client.with_namespace(NAMESPACE)
    try:
        yield ns
    finally:
        ns._connection.observer = None
        ex = Executor(ns)
        for info in ex.list(all_tasks=True):
            ex.destroy(info.id, force=True)
        remove_image(ns, test_image, force=True, sync=True)
        subprocess.run(
            ["ctr", "--address", containerd_address, "namespaces", "rm", NAMESPACE],
            check=True,
            capture_output=True,
        )


def _cfg(name: str, image: str, **kw: object) -> TaskConfig:
    return TaskConfig(name=name, image=image, command=("sleep", "60"), **kw)  # type: ignore[arg-type]


def test_a_warm_start_task_makes_five_round_trips(
    own_ns: Client, tmp_path: Path, test_image: str
) -> None:
    ex = Executor(own_ns, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    ex.start_task(_cfg("sp-warm-0", test_image))
    calls = Calls()
    own_ns._connection.observer = calls
    handle = ex.start_task(_cfg("sp-warm-1", test_image))
    own_ns._connection.observer = None
    assert handle.pid > 0
    assert sum(calls.seen.values()) <= MAX_ROUND_TRIPS, calls.seen
    assert [m for m in calls.seen if m.startswith(REPEATED)] == [], calls.seen
    assert calls.seen["Tasks.Create"] == calls.seen["Tasks.Start"] == 1


def test_a_cached_image_removed_and_imported_again_still_starts(
    own_ns: Client, containerd_address: str, test_image_archive: Path, tmp_path: Path,
    test_image: str,
) -> None:  # fmt: skip
    """The cache said "unpacked"; the layers went with the image (GC, sync); the
    Prepare that finds its parent gone unpacks again instead of failing."""
    ex = Executor(own_ns, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    ex.start_task(_cfg("sp-gone-0", test_image))
    ex.destroy("sp-gone-0", force=True)
    remove_image(own_ns, test_image, force=True, sync=True)
    assert len(ex.images.ready) == 1  # still cached: the point of the test
    import_image(containerd_address, NAMESPACE, test_image_archive)
    image = lookup.get_image(own_ns, test_image)
    for chain_id in reversed(image.chain_ids):  # whether or not ctr unpacked it again
        snapshots.remove_snapshot(own_ns, chain_id)
    assert snapshots.stat_snapshot(own_ns, image.top_chain_id, "overlayfs") is None
    handle = ex.start_task(_cfg("sp-gone-1", test_image))
    assert handle.pid > 0
    assert ex.inspect("sp-gone-1").status.value == "running"


def test_the_user_is_read_from_the_image_once(
    own_ns: Client, tmp_path: Path, test_image: str
) -> None:
    ex = Executor(own_ns, log_dir=tmp_path / "logs", files_dir=tmp_path / "files")
    ex.start_task(_cfg("sp-user-0", test_image, user="app"))
    calls = Calls()
    own_ns._connection.observer = calls
    ex.start_task(_cfg("sp-user-1", test_image, user="app"))
    own_ns._connection.observer = None
    assert calls.seen["Snapshots.View"] == 0, calls.seen
    # Both specs carry app's ids from the image's /etc/passwd and /etc/group.
    user = containers.get(own_ns, "sp-user-1").spec["process"]["user"]
    assert (user["uid"], user["gid"]) == (1000, 1000)
