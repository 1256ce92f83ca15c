"""A removal of many costs each task's own work, not a look at the whole namespace or host
per task (issue 40): ``rm -f`` of N listed the namespace's every container (are the
cgroup parents free to go?) and scanned every process of the host (orphaned shims) once
per task, so N removals cost N² as both grow with N.

The looks are counted, not timed: one batch of 12 makes as many as one of 3. What the
batch leaves to its end still happens: every record and task is gone, and with the
namespace's last container the namespace's cgroup parents go too, as with a single
destroy of the last one.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctrexec import ids
from ctrexec._linux import CGROUP_ROOT
from ctrexec.containerd import containers, tasks
from ctrexec.containerd.client import Client
from ctrexec.errors import NotFound
from ctrexec.logs import orphaned_shims
from ctrexec.tasks import stale
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

pytestmark = pytest.mark.integration


def _counted(counts: Counter[str], what: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[what] += 1
        return call(*args, **kwargs)

    return counting


def _namespace_cgroups(namespace: str) -> list[Path]:
    """The namespace's cgroup (``ctrexec/<namespace>``) in every hierarchy that has it."""
    relative = Path(ids.task_cgroup(namespace, "x").lstrip("/")).parent
    trees = [CGROUP_ROOT, *[p for p in CGROUP_ROOT.iterdir() if p.is_dir()]]
    return [tree / relative for tree in trees if (tree / relative).exists()]


def _looks_of_removing(
    client: Client, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> Counter[str]:
    """Start ``n`` tasks, remove them all with one ``remove_many(force=True)``; the
    namespace listings and host process scans that removal made."""
    ex = Executor(client, log_dir=tmp_path / "logs")
    names = [f"rmc-{n}-{i}" for i in range(n)]
    counts: Counter[str] = Counter()
    try:
        for name in names:
            ex.start_task(TaskConfig(name=name, image=image, command=("sleep", "1000")))
        assert all(tasks.find(client, name) is not None for name in names)
        with monkeypatch.context() as patch:
            listing = _counted(counts, "listings", containers.list_containers)
            patch.setattr(containers, "list_containers", listing)
            looks = _counted(counts, "orphan looks", stale.stop_orphaned_drivers_of)
            patch.setattr(stale, "stop_orphaned_drivers_of", looks)
            scans = _counted(counts, "scans", orphaned_shims.processes)
            patch.setattr(orphaned_shims, "processes", scans)
            results = ex.remove_many(names, force=True)
        assert results == [(name, None) for name in names]
    finally:
        for name in names:  # what a failed removal left
            with contextlib.suppress(NotFound):
                ex.destroy(name, force=True)
    assert all(tasks.find(client, name) is None for name in names)
    return counts


def test_removing_many_looks_at_the_namespace_and_host_as_often_as_removing_few(
    client: Client, test_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert containers.list_containers(client) == []  # the test's own namespace, empty
    few = _looks_of_removing(client, test_image, tmp_path / "few", monkeypatch, 3)
    many = _looks_of_removing(client, test_image, tmp_path / "many", monkeypatch, 12)
    # A look for orphaned shims scans the host again while a shim of its tasks is still
    # there (one exiting as the look begins): that count is the host's timing, not N's.
    scans = (few.pop("scans"), many.pop("scans"))
    assert many == few == {"listings": 1, "orphan looks": 1}
    assert min(scans) >= 1
    # The last container gone, the namespace's cgroup went with it (each task's own
    # cgroup was waited for first, as by a single destroy).
    assert _namespace_cgroups(client.namespace) == []
