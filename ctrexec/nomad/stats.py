"""ctrexec's :class:`Stats` samples as Nomad's TaskStats, filled as Nomad's own
executor (the exec driver's) fills them, so the UI, ``nomad alloc status -stats`` and
the client's metrics read the same fields from this driver.

- Memory: rss, cache, swap and usage (``memory.usage_in_bytes`` / ``memory.current``,
  page cache included, as Nomad reports it); on cgroup v1 also the peak (max usage)
  and kernel memory. ``measured_fields`` lists what the cgroup version has, as Nomad's
  executor lists it: v1 RSS, Cache, Swap, Usage, Max Usage, Kernel Usage, Kernel Max
  Usage; v2 RSS, Cache, Swap, Usage. Nomad's client publishes a memory gauge only
  when its field is listed. One difference: Nomad's executor reports, on v1, the
  memory+swap counter (memsw) as Swap; this driver reports the swap alone, as
  Nomad's docker driver does.
- CPU: percent, user and system mode as percentages of one core over the time since
  the previous sample (the first sample of a stream has no previous one: 0, as
  Nomad's tracker gives); throttled periods and time (ns) as the cgroup counts them;
  ``total_ticks``, the MHz used, from the node's compute that Nomad sends in
  SetConfig (its topology: the override, or the cores' speeds). Measured: System
  Mode, User Mode, Throttled Periods, Throttled Time, Percent, on either version.
- No ``resource_usage_by_pid``: Nomad's executor lists its processes; the UI and
  the metrics read only the aggregate.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ctrexec import Stats, to_timestamp
from ctrexec._api.nomad.base import base_pb2 as bpb
from ctrexec._api.nomad.drivers import driver_pb2 as pb

_CPU = pb.CPUUsage
_MEM = pb.MemoryUsage
CPU_MEASURED = (
    _CPU.SYSTEM_MODE,
    _CPU.USER_MODE,
    _CPU.THROTTLED_PERIODS,
    _CPU.THROTTLED_TIME,
    _CPU.PERCENT,
)
MEMORY_MEASURED = {
    1: (
        _MEM.RSS,
        _MEM.CACHE,
        _MEM.SWAP,
        _MEM.USAGE,
        _MEM.MAX_USAGE,
        _MEM.KERNEL_USAGE,
        _MEM.KERNEL_MAX_USAGE,
    ),
    2: (_MEM.RSS, _MEM.CACHE, _MEM.SWAP, _MEM.USAGE),
}


@attrs.frozen
class Compute:
    """The node's CPU as Nomad counts it: total MHz over its cores."""

    total_mhz: float = 0.0
    cores: int = 0

    @classmethod
    def from_topology(cls, topology: bpb.ClientTopology) -> Compute:
        """Nomad's rule: the override when set, else each core's base speed, else its
        max speed, else its guessed speed, summed."""
        total = topology.override_total_compute or sum(
            c.base_speed or c.max_speed or c.guess_speed for c in topology.cores
        )
        return cls(total_mhz=float(total), cores=len(topology.cores))

    def ticks(self, percent: float) -> float:
        """MHz used by ``percent`` of one core; 0 when Nomad sent no topology."""
        if self.cores <= 0:
            return 0.0
        return percent / 100.0 * self.total_mhz / self.cores


class StatsSampler:
    """Keeps the previous sample of one stream, since CPU use is a rate."""

    def __init__(self, task_id: str, compute: Compute | None = None) -> None:
        self.task_id = task_id
        self.compute = compute or Compute()
        self._last: Stats | None = None

    def _cpu(self, now: Stats) -> pb.CPUUsage:
        last, self._last = self._last, now
        wall = (now.read_at - last.read_at).total_seconds() * 1e9 if last else 0.0

        def pct(read: Callable[[Stats], int]) -> float:
            """The share of the wall time since the last sample; 0 for the first."""
            if last is None or wall <= 0:
                return 0.0
            return max(0.0, (read(now) - read(last)) / wall * 100.0)

        percent = pct(lambda s: s.cpu_usage_ns)
        return pb.CPUUsage(
            percent=percent,
            user_mode=pct(lambda s: s.cpu_user_ns),
            system_mode=pct(lambda s: s.cpu_system_ns),
            throttled_periods=now.cpu_throttled_periods,
            throttled_time=now.cpu_throttled_ns,
            total_ticks=self.compute.ticks(percent),
            measured_fields=CPU_MEASURED,
        )

    @staticmethod
    def _memory(now: Stats) -> pb.MemoryUsage:
        return pb.MemoryUsage(
            rss=now.memory_rss,
            cache=now.memory_cache,
            swap=now.memory_swap,
            usage=now.memory_usage,
            max_usage=now.memory_max_usage or 0,
            kernel_usage=now.memory_kernel_usage or 0,
            kernel_max_usage=now.memory_kernel_max_usage or 0,
            measured_fields=MEMORY_MEASURED.get(now.cgroup_version, MEMORY_MEASURED[2]),
        )

    def convert(self, now: Stats) -> pb.TaskStats:
        usage = pb.TaskResourceUsage(cpu=self._cpu(now), memory=self._memory(now))
        return pb.TaskStats(
            id=self.task_id, timestamp=to_timestamp(now.read_at), agg_resource_usage=usage
        )
