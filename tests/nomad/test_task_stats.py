"""TaskStats as Nomad reads them, field by field against the task's own cgroup files.

The task allocates a fixed amount of memory and then sleeps, so its numbers settle;
each check waits (bounded) for a sample that the files, read right after it, agree
with. The cgroup is found from the task's pid (/proc/<pid>/cgroup), wherever the
plugin placed it, on cgroup v1 or v2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import AllocDir, check_start_response, task_config
from _node import CORE_MHZ, CORES, Node
from google.protobuf import duration_pb2

from ctrexec._api.nomad.drivers import driver_pb2 as dpb
from ctrexec.nomad.stats import CPU_MEASURED, MEMORY_MEASURED
from ctrexec.testing import wait_for

IMAGE = "docker.io/library/ctrexec-test:latest"
ROOT = Path("/sys/fs/cgroup")
HELD = 16_000_000  # bytes the task keeps in a shell variable
MEM_SLACK = 1 << 20  # what an idle shell's memory may move between two reads
SCRIPT = f"x=$(head -c {HELD} /dev/zero | tr '\\0' a); touch /alloc/ready; sleep 600; echo ${{#x}}"


def _stat_file(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def _int(path: Path) -> int:
    return int(path.read_text().split()[0])


class Cgroup:
    """The files of one task's cgroup, v1 (one directory per controller) or v2."""

    def __init__(self, pid: int) -> None:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        paths = {ctl: path for _id, ctls, path in (ln.split(":", 2) for ln in lines) for ctl in ctls.split(",")}  # fmt: skip
        self.version = 1 if "memory" in paths else 2
        if self.version == 1:
            self.mem = ROOT / "memory" / paths["memory"].lstrip("/")
            self.cpu = ROOT / "cpu" / paths["cpu"].lstrip("/")
        else:
            self.mem = self.cpu = ROOT / paths[""].lstrip("/")

    def read(self) -> dict[str, int]:
        """What Nomad's MemoryUsage and CPUUsage fields should say, from the files."""
        stat = _stat_file(self.mem / "memory.stat")
        cpu = _stat_file(self.cpu / "cpu.stat")
        if self.version == 1:
            usage = _int(self.mem / "memory.usage_in_bytes")
            memsw = self.mem / "memory.memsw.usage_in_bytes"
            return {
                "rss": stat["total_rss"],
                "cache": stat["total_cache"],
                "usage": usage,
                "swap": max(_int(memsw) - usage, 0) if memsw.exists() else 0,
                "max_usage": _int(self.mem / "memory.max_usage_in_bytes"),
                "kernel_usage": _int(self.mem / "memory.kmem.usage_in_bytes"),
                "kernel_max_usage": _int(self.mem / "memory.kmem.max_usage_in_bytes"),
                "throttled_periods": cpu["nr_throttled"],
                "throttled_time": cpu["throttled_time"],
            }
        swap = self.mem / "memory.swap.current"
        return {
            "rss": stat["anon"],
            "cache": stat["file"],
            "usage": _int(self.mem / "memory.current"),
            "swap": _int(swap) if swap.exists() else 0,
            "throttled_periods": cpu["nr_throttled"],
            "throttled_time": cpu["throttled_usec"] * 1000,
        }


MEMORY = ("rss", "cache", "usage", "swap", "max_usage", "kernel_usage", "kernel_max_usage")


def _mismatches(sample: dpb.TaskResourceUsage, files: dict[str, int]) -> list[str]:
    out = []
    for name, want in files.items():
        got = getattr(sample.memory if name in MEMORY else sample.cpu, name)
        slack = MEM_SLACK if name in MEMORY else 0
        if abs(got - want) > slack:
            out.append(f"{name}: TaskStats {got}, cgroup {want}")
    return out


@pytest.fixture
def held(node: Node, alloc: AllocDir) -> Iterator[tuple[dpb.TaskHandle, Cgroup]]:
    tc = task_config(
        alloc, "mem", node.task_spec, {"image": IMAGE, "command": "sh", "args": ["-c", SCRIPT]}
    )
    resp = node.start(tc)
    check_start_response(resp)
    ready = alloc.path / "alloc" / "ready"
    wait_for(ready.exists, timeout=60, what="memory held")
    inspect = node.plugin.driver.InspectTask(dpb.InspectTaskRequest(task_id=tc.id), timeout=10)
    yield resp.handle, Cgroup(int(inspect.driver.attributes["pid"]))


def test_task_stats_match_the_cgroup_files(node: Node, held: Any) -> None:
    handle, cgroup = held
    stream = node.plugin.driver.TaskStats(
        dpb.TaskStatsRequest(
            task_id=handle.config.id,
            collection_interval=duration_pb2.Duration(nanos=200_000_000),
        ),
        timeout=300,
    )
    last: list[str] = ["no sample yet"]
    seen: list[dpb.TaskStats] = []

    def agreed() -> bool:
        seen.append(next(stream).stats)
        last[:] = _mismatches(seen[-1].agg_resource_usage, cgroup.read())
        return not last

    try:
        wait_for(agreed, timeout=120, interval=0, what="a sample the cgroup files agree with")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last}") from None
    finally:
        stream.cancel()
    usage = seen[-1].agg_resource_usage
    assert usage.memory.rss >= HELD
    assert usage.memory.usage >= usage.memory.rss
    if cgroup.version == 1:
        assert usage.memory.max_usage >= usage.memory.usage
    assert list(usage.memory.measured_fields) == list(MEMORY_MEASURED[cgroup.version])
    for s in seen:
        cpu = s.agg_resource_usage.cpu
        assert list(cpu.measured_fields) == list(CPU_MEASURED)
        assert cpu.percent >= 0 and cpu.user_mode >= 0 and cpu.system_mode >= 0
        # MHz used: the share of one core times the node's MHz per core
        assert cpu.total_ticks == pytest.approx(cpu.percent / 100 * (CORE_MHZ * CORES) / CORES)
    assert seen[0].agg_resource_usage.cpu.percent == 0  # no previous sample: Nomad's 0
