from __future__ import annotations

import pytest
from google.protobuf import any_pb2

from ctrexec import errors
from ctrexec._api.cgroups.v1 import metrics_pb2 as v1
from ctrexec._api.cgroups.v2 import metrics_pb2 as v2
from ctrexec.containerd.stats import decode


def _pack(msg: v1.Metrics | v2.Metrics, name: str) -> any_pb2.Any:
    return any_pb2.Any(type_url=name, value=msg.SerializeToString())


def test_v1() -> None:
    m = v1.Metrics()
    m.cpu.usage.total = 5_000
    m.cpu.usage.user = 3_000
    m.cpu.usage.kernel = 2_000
    m.memory.usage.usage = 10 << 20
    m.memory.usage.limit = 0x7FFFFFFFFFFFF000
    m.memory.total_inactive_file = 2 << 20
    m.pids.current = 3
    m.pids.limit = 100
    s = decode(_pack(m, "io.containerd.cgroups.v1.Metrics"))
    assert (s.cgroup_version, s.cpu_usage_ns, s.cpu_user_ns, s.cpu_system_ns) == (
        1,
        5000,
        3000,
        2000,
    )
    assert s.memory_usage == 10 << 20
    assert s.memory_working_set == 8 << 20
    assert s.memory_limit is None
    assert (s.pids_current, s.pids_limit) == (3, 100)


def test_v2() -> None:
    m = v2.Metrics()
    m.cpu.usage_usec = 7
    m.memory.usage = 4096
    m.memory.usage_limit = 1 << 20
    m.memory.inactive_file = 1024
    m.pids.current = 1
    s = decode(_pack(m, "types.googleapis.com/io.containerd.cgroups.v2.Metrics"))
    assert (s.cgroup_version, s.cpu_usage_ns, s.memory_working_set) == (2, 7000, 3072)
    assert s.memory_limit == 1 << 20
    assert s.pids_limit is None
    assert s.to_json()["cgroup_version"] == 2


def test_block_io_both_versions() -> None:
    """docker's BLOCK I/O: bytes read and written, summed over devices; v1's Total,
    Sync and Async lines repeat the same bytes and are not counted again."""
    m1 = v1.Metrics()
    for op, major, value in [
        ("Read", 8, 100),
        ("Write", 8, 40),
        ("Read", 253, 5),
        ("Total", 8, 140),
    ]:
        m1.blkio.io_service_bytes_recursive.add(op=op, major=major, value=value)
    s1 = decode(_pack(m1, "io.containerd.cgroups.v1.Metrics"))
    assert (s1.block_read_bytes, s1.block_write_bytes) == (105, 40)
    m2 = v2.Metrics()
    m2.io.usage.add(major=8, rbytes=7, wbytes=3)
    m2.io.usage.add(major=253, rbytes=1, wbytes=2)
    s2 = decode(_pack(m2, "io.containerd.cgroups.v2.Metrics"))
    assert (s2.block_read_bytes, s2.block_write_bytes) == (8, 5)


def test_unknown_type() -> None:
    with pytest.raises(errors.Internal):
        decode(any_pb2.Any(type_url="x.y/Other", value=b""))
