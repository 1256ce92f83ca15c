"""Decoding Tasks.Metrics into one shape for cgroup v1 and v2.

containerd returns an Any whose type tells the cgroup version. Schedulers want the
same few numbers either way (cpu time, memory in use and its limit, pids), so both
are mapped onto :class:`Stats`. Memory "in use" follows docker: usage minus the
inactive page cache, which the kernel can reclaim at once.

The finer numbers (rss, cache, swap, peak and kernel memory, CPU throttling) are the
ones Nomad's TaskStats carries. What each cgroup version has:

- v1: rss and cache from ``memory.stat``; swap is ``memory.memsw.usage_in_bytes``
  minus ``memory.usage_in_bytes`` (the swap alone; 0 without swap accounting); the
  peak from ``memory.max_usage_in_bytes``; kernel memory from ``memory.kmem.*``;
  throttling from ``cpu.stat`` (time in ns).
- v2: rss is ``anon`` and cache ``file`` of ``memory.stat``; swap is
  ``memory.swap.current``; containerd's v2 metrics carry no peak and no kernel
  memory (None); throttling from ``cpu.stat`` (``throttled_usec``, kept in ns).
- both: BLOCK I/O, bytes read and written over all devices, from v1's
  ``blkio.io_service_bytes_recursive`` and v2's ``io.stat`` (rbytes, wbytes).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import attrs
from google.protobuf import any_pb2

from ctrexec.errors import Internal

V1_TYPE = "io.containerd.cgroups.v1.Metrics"
V2_TYPE = "io.containerd.cgroups.v2.Metrics"
#: cgroup v1 reports "no limit" as the largest page-aligned int64.
_V1_UNLIMITED = 0x7FFFFFFFFFFFF000


@attrs.frozen
class Stats:
    """Resource use of one task at one moment."""

    cgroup_version: int
    cpu_usage_ns: int
    cpu_user_ns: int
    cpu_system_ns: int
    memory_usage: int
    memory_working_set: int
    memory_limit: int | None
    pids_current: int
    pids_limit: int | None
    read_at: datetime = attrs.field(factory=lambda: datetime.now(UTC))
    memory_rss: int = 0
    memory_cache: int = 0
    memory_swap: int = 0
    memory_max_usage: int | None = None
    memory_kernel_usage: int | None = None
    memory_kernel_max_usage: int | None = None
    cpu_throttled_periods: int = 0
    cpu_throttled_ns: int = 0
    block_read_bytes: int = 0
    block_write_bytes: int = 0

    def to_json(self) -> dict[str, object]:
        data = attrs.asdict(self)
        data["read_at"] = self.read_at.isoformat()
        return data


def oom_kills(data: any_pb2.Any) -> int:
    """How many processes the OOM killer killed in the cgroup (v1 ``memory.oom_control``,
    v2 ``memory.events``): the fact that survives the exit, until the task is deleted."""
    # the cgroup metrics stubs load when metrics are read, not with every command
    # that imports this module (the executor does, for each start)
    from ctrexec._api.cgroups.v1 import metrics_pb2 as v1
    from ctrexec._api.cgroups.v2 import metrics_pb2 as v2

    name = _type_name(data)
    if name == V1_TYPE:
        return int(v1.Metrics.FromString(data.value).memory_oom_control.oom_kill)
    if name == V2_TYPE:
        return int(v2.Metrics.FromString(data.value).memory_events.oom_kill)
    raise Internal(f"unknown metrics type {data.type_url!r}")


def _type_name(data: any_pb2.Any) -> str:
    return data.type_url.rsplit("/", 1)[-1]


def decode(data: any_pb2.Any) -> Stats:
    """Decode a Metrics Any from containerd, either cgroup version."""
    # the cgroup metrics stubs load when metrics are read, not with every command
    # that imports this module (the executor does, for each start)
    from ctrexec._api.cgroups.v1 import metrics_pb2 as v1
    from ctrexec._api.cgroups.v2 import metrics_pb2 as v2

    name = _type_name(data)
    if name == V1_TYPE:
        m1 = v1.Metrics.FromString(data.value)
        mem = m1.memory
        usage = mem.usage.usage
        limit = mem.usage.limit
        inactive = mem.total_inactive_file or mem.inactive_file
        return Stats(
            cgroup_version=1,
            cpu_usage_ns=m1.cpu.usage.total,
            cpu_user_ns=m1.cpu.usage.user,
            cpu_system_ns=m1.cpu.usage.kernel,
            memory_usage=usage,
            memory_working_set=max(usage - inactive, 0),
            memory_limit=None if limit == 0 or limit >= _V1_UNLIMITED else limit,
            pids_current=m1.pids.current,
            pids_limit=m1.pids.limit or None,
            memory_rss=mem.total_rss or mem.rss,
            memory_cache=mem.total_cache or mem.cache,
            # memsw counts memory and swap together; no swap accounting: usage 0
            memory_swap=max(mem.swap.usage - usage, 0) if mem.swap.usage else 0,
            memory_max_usage=mem.usage.max,
            memory_kernel_usage=mem.kernel.usage,
            memory_kernel_max_usage=mem.kernel.max,
            cpu_throttled_periods=m1.cpu.throttling.throttled_periods,
            cpu_throttled_ns=m1.cpu.throttling.throttled_time,
            block_read_bytes=_v1_block(m1.blkio.io_service_bytes_recursive, "read"),
            block_write_bytes=_v1_block(m1.blkio.io_service_bytes_recursive, "write"),
        )
    if name == V2_TYPE:
        m2 = v2.Metrics.FromString(data.value)
        mem2 = m2.memory
        return Stats(
            cgroup_version=2,
            cpu_usage_ns=m2.cpu.usage_usec * 1000,
            cpu_user_ns=m2.cpu.user_usec * 1000,
            cpu_system_ns=m2.cpu.system_usec * 1000,
            memory_usage=mem2.usage,
            memory_working_set=max(mem2.usage - mem2.inactive_file, 0),
            memory_limit=mem2.usage_limit if 0 < mem2.usage_limit < 2**63 else None,
            pids_current=m2.pids.current,
            pids_limit=m2.pids.limit or None,
            memory_rss=mem2.anon,
            memory_cache=mem2.file,
            memory_swap=mem2.swap_usage,
            cpu_throttled_periods=m2.cpu.nr_throttled,
            cpu_throttled_ns=m2.cpu.throttled_usec * 1000,
            block_read_bytes=sum(e.rbytes for e in m2.io.usage),
            block_write_bytes=sum(e.wbytes for e in m2.io.usage),
        )
    raise Internal(f"unknown metrics type {data.type_url!r}")


def _v1_block(entries: Iterable[Any], op: str) -> int:
    """Bytes read or written over all devices (``blkio.io_service_bytes_recursive``,
    whose ops are Read, Write, Sync, Async and Total): docker's BLOCK I/O."""
    return sum(e.value for e in entries if e.op.lower() == op)
