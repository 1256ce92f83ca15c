"""Tasks run in the cgroup Nomad's client made for them (``cpuset_cgroup``), on this
host's cgroup v1 layout, as Nomad's exec driver places its own: the init process in
the cpuset hierarchy's ``<parent>/share`` (or ``<parent>/reserve/<alloc>.<task>``),
every other hierarchy at ``<parent>/<alloc>.<task>``. The harness makes the cgroups
Nomad's client would (its cgroupslib init and the task's wrangler), under a parent of
the test's own, and removes them after."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from _harness import AllocDir, check_start_response, task_config
from _node import Node
from google.protobuf import duration_pb2

from ctrexec import _linux
from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.containerd import containers, tasks
from ctrexec.nomad.taskmap import container_id
from ctrexec.testing import wait_for

pytestmark = pytest.mark.skipif(
    _linux.cgroup_v2_only(), reason="the cgroup v1 layout; docs/nomad.md says what v2 changes"
)
IMAGE = "docker.io/library/ctrexec-test:latest"
ROOT = _linux.CGROUP_ROOT
#: What Nomad's wrangler makes for each task besides its cpuset cgroup (lifeCG1).
TASK_HIERARCHIES = ("freezer", "cpu", "memory")


def _procs(path: Path) -> set[int]:
    try:
        return {int(p) for p in (path / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


class NomadCgroups:
    """Nomad's client's v1 cgroups under a parent of this test's: the cpuset
    partitions ``share`` and ``reserve`` with the usable cores, and a task's own."""

    def __init__(self) -> None:
        self.parent = f"ctrexec-test-nomad-{uuid.uuid4().hex[:8]}"
        cpuset = ROOT / "cpuset"
        self.cpus = (cpuset / "cpuset.cpus").read_text().strip()
        self.mems = (cpuset / "cpuset.mems").read_text().strip()
        for part in ("", "share", "reserve"):
            self._cpuset_dir(cpuset / self.parent / part, cpus=self.cpus)

    def _cpuset_dir(self, path: Path, *, cpus: str | None) -> None:
        """mkdir, then what Nomad writes: mems (inherited), and cpus for a partition."""
        path.mkdir(exist_ok=True)
        (path / "cpuset.mems").write_text(self.mems)
        if cpus:
            (path / "cpuset.cpus").write_text(cpus)

    def add_task(self, alloc_id: str, task: str, *, reserve: bool) -> str:
        """The task's cgroups as the wrangler's Setup makes them; the path Nomad puts
        in ``cpuset_cgroup``."""
        scope = f"{alloc_id}.{task}"
        for hierarchy in TASK_HIERARCHIES:
            (ROOT / hierarchy / self.parent / scope).mkdir(parents=True, exist_ok=True)
        cpuset = ROOT / "cpuset" / self.parent
        if reserve:  # no cpus: the driver writes the task's reserved cores
            self._cpuset_dir(cpuset / "reserve" / scope, cpus=None)
            return str(cpuset / "reserve" / scope)
        return str(cpuset / "share")

    def exists(self, hierarchy: str, *parts: str) -> bool:
        return (ROOT / hierarchy / self.parent).joinpath(*parts).is_dir()

    def remove(self) -> None:
        """Every directory under the parent in every hierarchy (runc made some too),
        leaves first; a cgroup whose last process is still being torn down refuses
        rmdir for a moment."""
        for hierarchy in [p for p in ROOT.iterdir() if p.is_dir()]:
            top = hierarchy / self.parent
            if not top.is_dir():
                continue
            dirs = [Path(d) for d, _, _ in os.walk(top)]
            for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
                wait_for(lambda d=d: _rmdir(d), timeout=30, what=f"{d} removed")


def _rmdir(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        try:
            path.rmdir()
        except OSError:
            return False
    return True


@pytest.fixture
def nomad_cgroups() -> Iterator[NomadCgroups]:
    cg = NomadCgroups()
    try:
        yield cg
    finally:
        cg.remove()
    assert not any((p / cg.parent).exists() for p in ROOT.iterdir())


def _start_in_cgroup(
    node: Node, alloc: AllocDir, name: str, path: str, *, cores: str = ""
) -> dpb.TaskHandle:
    tc = task_config(
        alloc, name, node.task_spec, {"image": IMAGE, "command": "sleep", "args": ["600"]}
    )
    tc.resources.linux_resources.cpuset_cgroup = path
    tc.resources.linux_resources.cpuset_cpus = cores
    resp = node.start(tc)
    check_start_response(resp)
    return resp.handle


@pytest.mark.parametrize("reserve", [False, True], ids=["share", "reserve"])
def test_a_task_runs_in_the_cgroups_nomad_made(
    nomad_cgroups: NomadCgroups, node: Node, alloc: AllocDir, nomad_client: Any, reserve: bool
) -> None:
    """The cgroups come first so they go last, after the node destroyed its tasks."""
    name = "cg-reserve" if reserve else "cg-share"
    scope = f"{alloc.alloc_id}.{name}"
    cpuset = nomad_cgroups.add_task(alloc.alloc_id, name, reserve=reserve)
    cores = nomad_cgroups.cpus.split("-")[0].split(",")[0] if reserve else ""
    h = _start_in_cgroup(node, alloc, name, cpuset, cores=cores)
    cid = container_id(h.config.id)
    state = tasks.find(nomad_client, cid)
    assert state is not None and state.pid > 0
    wait_for(
        lambda: state.pid in _procs(Path(cpuset)), timeout=30, what="the pid in Nomad's cpuset"
    )
    for hierarchy in TASK_HIERARCHIES:
        task_cg = ROOT / hierarchy / nomad_cgroups.parent / scope
        wait_for(lambda p=task_cg: state.pid in _procs(p), timeout=30, what=f"the pid in {task_cg}")
    memory = ROOT / "memory" / nomad_cgroups.parent / scope
    assert int((memory / "memory.limit_in_bytes").read_text()) == 64 * 1024 * 1024
    if reserve:
        assert (Path(cpuset) / "cpuset.cpus").read_text().strip() == cores
    assert not (ROOT / "memory" / "ctrexec" / nomad_client.namespace / cid).exists()
    # containerd reads the task's usage where it runs: Nomad's accounting sees the same.
    interval = duration_pb2.Duration(nanos=100_000_000)
    stats = node.plugin.driver.TaskStats(
        dpb.TaskStatsRequest(task_id=h.config.id, collection_interval=interval), timeout=60
    )
    assert next(stats).stats.agg_resource_usage.memory.usage > 0
    stats.cancel()
    node.plugin.driver.DestroyTask(dpb.DestroyTaskRequest(task_id=h.config.id, force=True))
    # What Nomad's client owns stays: the parent and its partitions.
    for part in ("", "share", "reserve"):
        assert nomad_cgroups.exists("cpuset", part), part
    assert nomad_cgroups.exists("memory")


def test_a_cgroup_path_that_escapes_is_refused_before_anything_is_made(
    node: Node, alloc: AllocDir, nomad_client: Any
) -> None:
    escape = "/sys/fs/cgroup/cpuset/nomad/../../../../tmp/share"
    with pytest.raises(grpc.RpcError) as err:
        _start_in_cgroup(node, alloc, "cg-bad", escape)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'..'" in (err.value.details() or "") and "\n" not in (err.value.details() or "")
    assert containers.list_containers(nomad_client) == []
