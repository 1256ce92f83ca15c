"""``stats``' columns and ``--format`` as docker prints them, without a daemon."""

from __future__ import annotations

import json
import re

import attrs
import pytest

from ctrexec.cli.views.stats import STATS_DEFAULT, StatsRow, bytes_size, stats_lines
from ctrexec.containerd.stats import Stats
from ctrexec.errors import InvalidArgument

HOST = 8 << 30
STATS = Stats(
    cgroup_version=1,
    cpu_usage_ns=0,
    cpu_user_ns=0,
    cpu_system_ns=0,
    memory_usage=3 << 20,
    memory_working_set=(3 << 20) // 2,
    memory_limit=None,
    pids_current=2,
    pids_limit=None,
    block_read_bytes=1_200,
    block_write_bytes=4_500_000,
)


def test_bytes_size_is_go_units() -> None:
    assert [bytes_size(n) for n in (0, 1023, 1024, 1_594_000, 8 << 30)] == [
        "0B",
        "1023B",
        "1KiB",
        "1.52MiB",
        "8GiB",
    ]


def test_default_table_has_docker_s_columns() -> None:
    row = StatsRow("web", STATS, 12.345, (1_234, 648), HOST)
    header, line = stats_lines([row], STATS_DEFAULT)
    assert re.split(r" {2,}", header) == [
        "NAME", "CPU %", "MEM USAGE / LIMIT", "MEM %", "NET I/O", "BLOCK I/O", "PIDS",
    ]  # fmt: skip
    assert re.split(r" {2,}", line) == [
        "web",
        "12.35%",
        "1.5MiB / 8GiB",
        "0.02%",
        "1.23kB / 648B",
        "1.2kB / 4.5MB",
        "2",
    ]


def test_a_limit_is_shown_when_set() -> None:
    limited = attrs.evolve(STATS, memory_limit=64 << 20)
    row = StatsRow("web", limited, 0.0, None, HOST)
    assert stats_lines([row], "{{.MemUsage}} {{.MemPerc}} {{.NetIO}}") == [
        "1.5MiB / 64MiB 2.34% --"
    ]


def test_format_json_and_table() -> None:
    row = StatsRow("a-long-container-name", STATS, 0.0, (0, 0), HOST)
    whole = json.loads(stats_lines([row], "json")[0])
    assert set(whole) == {
        "Container", "Name", "ID", "CPUPerc", "MemUsage", "MemPerc", "NetIO", "BlockIO", "PIDs",
    }  # fmt: skip
    assert (whole["ID"], whole["NetIO"]) == ("a-long-container-name", "0B / 0B")  # whole, as ps
    assert stats_lines([row], r"table {{.Container}}\t{{.PIDs}}") == [
        "CONTAINER               PIDS",
        "a-long-container-name   2",
    ]


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"unknown field \.Nope"):
        stats_lines([], "{{.Nope}}")
