"""ctrexec's :class:`Stats` samples as Nomad's TaskStats: CPU as percentages of one
core over the interval since the previous sample, memory as cgroup usage."""

from __future__ import annotations

from ctrexec._api.nomad.drivers import driver_pb2 as pb
from ctrexec.containerd import _proto
from ctrexec.containerd.stats import Stats

_CPU = pb.CPUUsage
_MEM = pb.MemoryUsage


class StatsSampler:
    """Keeps the previous sample of one stream, since CPU use is a rate."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._last: Stats | None = None

    def _cpu(self, now: Stats) -> pb.CPUUsage:
        last, self._last = self._last, now
        if last is None:
            return pb.CPUUsage(measured_fields=[])
        wall = (now.read_at - last.read_at).total_seconds() * 1e9
        if wall <= 0:
            return pb.CPUUsage(measured_fields=[])

        def pct(a: int, b: int) -> float:
            return max(0.0, (a - b) / wall * 100.0)

        return pb.CPUUsage(
            percent=pct(now.cpu_usage_ns, last.cpu_usage_ns),
            user_mode=pct(now.cpu_user_ns, last.cpu_user_ns),
            system_mode=pct(now.cpu_system_ns, last.cpu_system_ns),
            measured_fields=[_CPU.PERCENT, _CPU.USER_MODE, _CPU.SYSTEM_MODE],
        )

    def convert(self, now: Stats) -> pb.TaskStats:
        usage = pb.TaskResourceUsage(
            cpu=self._cpu(now),
            memory=pb.MemoryUsage(
                usage=now.memory_usage,
                rss=now.memory_working_set,
                measured_fields=[_MEM.USAGE, _MEM.RSS],
            ),
        )
        return pb.TaskStats(
            id=self.task_id, timestamp=_proto.to_timestamp(now.read_at), agg_resource_usage=usage
        )
