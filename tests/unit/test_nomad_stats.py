"""containerd's cgroup metrics as Nomad's TaskStats: the fields and the measured lists
Nomad's executor gives, CPU as a rate between samples, MHz from the node's topology."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from google.protobuf import any_pb2

from ctrexec._api.cgroups.v1 import metrics_pb2 as v1
from ctrexec._api.cgroups.v2 import metrics_pb2 as v2
from ctrexec._api.nomad.base import base_pb2 as bpb
from ctrexec._api.nomad.drivers import driver_pb2 as pb
from ctrexec.containerd.stats import Stats, decode
from ctrexec.nomad.stats import Compute, StatsSampler

MEM, CPU = pb.MemoryUsage, pb.CPUUsage
T0 = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)


def _v1(cpu_ns: int) -> any_pb2.Any:
    m = v1.Metrics()
    m.cpu.usage.total, m.cpu.usage.user, m.cpu.usage.kernel = cpu_ns, cpu_ns // 4 * 3, cpu_ns // 4
    m.cpu.throttling.throttled_periods, m.cpu.throttling.throttled_time = 5, 7_000
    m.memory.rss, m.memory.total_rss = 10, 30 << 20
    m.memory.total_cache = 4 << 20
    m.memory.usage.usage, m.memory.usage.max = 40 << 20, 50 << 20
    m.memory.swap.usage = (40 << 20) + (2 << 20)  # memsw: memory and swap
    m.memory.kernel.usage, m.memory.kernel.max = 1 << 20, 3 << 20
    return any_pb2.Any(type_url="io.containerd.cgroups.v1.Metrics", value=m.SerializeToString())


def _v2() -> any_pb2.Any:
    m = v2.Metrics()
    m.cpu.usage_usec, m.cpu.nr_throttled, m.cpu.throttled_usec = 9, 2, 3
    m.memory.anon, m.memory.file, m.memory.usage, m.memory.swap_usage = 5, 6, 20, 7
    return any_pb2.Any(type_url="io.containerd.cgroups.v2.Metrics", value=m.SerializeToString())


def test_v1_memory_and_throttling_as_nomad_reads_them() -> None:
    mem = StatsSampler("t").convert(decode(_v1(0))).agg_resource_usage.memory
    assert (mem.rss, mem.cache, mem.usage, mem.max_usage) == (30 << 20, 4 << 20, 40 << 20, 50 << 20)
    assert mem.swap == 2 << 20  # the swap alone, not memsw
    assert (mem.kernel_usage, mem.kernel_max_usage) == (1 << 20, 3 << 20)
    assert list(mem.measured_fields) == [
        MEM.RSS, MEM.CACHE, MEM.SWAP, MEM.USAGE, MEM.MAX_USAGE, MEM.KERNEL_USAGE, MEM.KERNEL_MAX_USAGE
    ]  # fmt: skip


def test_v2_lists_only_what_v2_has() -> None:
    s = decode(_v2())
    assert (s.cpu_throttled_periods, s.cpu_throttled_ns) == (2, 3000)
    usage = StatsSampler("t").convert(s).agg_resource_usage
    assert (usage.memory.rss, usage.memory.cache, usage.memory.usage, usage.memory.swap) == (
        5, 6, 20, 7,
    )  # fmt: skip
    assert list(usage.memory.measured_fields) == [MEM.RSS, MEM.CACHE, MEM.SWAP, MEM.USAGE]
    assert (usage.cpu.throttled_periods, usage.cpu.throttled_time) == (2, 3000)


def test_cpu_is_a_rate_and_total_ticks_are_mhz() -> None:
    topology = bpb.ClientTopology()
    for speed in (3000, 0):
        topology.cores.add(base_speed=speed, guess_speed=1000)
    compute = Compute.from_topology(topology)
    assert (compute.total_mhz, compute.cores) == (4000.0, 2)
    sampler = StatsSampler("t", compute)
    first = sampler.convert(attrs_at(decode(_v1(1_000_000_000)), T0)).agg_resource_usage.cpu
    assert (first.percent, first.total_ticks) == (0.0, 0.0)  # no previous sample
    measured = [
        CPU.SYSTEM_MODE,
        CPU.USER_MODE,
        CPU.THROTTLED_PERIODS,
        CPU.THROTTLED_TIME,
        CPU.PERCENT,
    ]
    assert list(first.measured_fields) == measured
    later = attrs_at(decode(_v1(1_500_000_000)), T0 + timedelta(seconds=1))
    cpu = sampler.convert(later).agg_resource_usage.cpu
    assert cpu.percent == pytest.approx(50.0)
    assert (cpu.user_mode, cpu.system_mode) == (pytest.approx(37.5), pytest.approx(12.5))
    assert cpu.total_ticks == pytest.approx(1000.0)  # half of one 2000 MHz core
    assert (cpu.throttled_periods, cpu.throttled_time) == (5, 7000)


def test_override_and_no_topology() -> None:
    topology = bpb.ClientTopology(override_total_compute=8000)
    topology.cores.add(base_speed=1)
    assert Compute.from_topology(topology).ticks(100.0) == 8000.0
    assert Compute().ticks(100.0) == 0.0  # Nomad sent none: no MHz rather than a guess


def attrs_at(s: Stats, when: datetime) -> Stats:
    return attrs.evolve(s, read_at=when)
