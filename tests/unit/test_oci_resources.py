"""Sizes and cgroup limits."""

from __future__ import annotations

from typing import Any

import pytest

from ctrexec.errors import InvalidArgument
from ctrexec.oci import (
    MIN_MEMORY_BYTES,
    build_spec,
    parse_size,
    with_cgroups_path,
    with_cpu_shares,
    with_cpus,
    with_cpuset,
    with_memory_limit,
    with_memory_reservation,
    with_memory_swap,
    with_pids_limit,
)

pytestmark = pytest.mark.unit


def _resources(spec: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = spec["linux"]["resources"]
    return resources


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 * 1024**2),
        ("1g", 1024**3),
        ("1G", 1024**3),
        ("100k", 100 * 1024),
        ("4096", 4096),
        ("4096b", 4096),
        ("64mb", 64 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("1.5g", 3 * 1024**3 // 2),
        ("1t", 1024**4),
        (" 10m ", 10 * 1024**2),
        (7340032, 7340032),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "m", "-1m", "1x", "1mm", "1 g b", "ten", -5, True, 1.5])
def test_parse_size_rejects(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        parse_size(bad)


def test_memory_limit() -> None:
    assert _resources(build_spec(with_memory_limit("512m")))["memory"] == {"limit": 512 << 20}
    assert MIN_MEMORY_BYTES == 6 << 20
    build_spec(with_memory_limit("6m"))


@pytest.mark.parametrize("small", ["5m", "6291455", 1024, "0"])
def test_memory_limit_minimum(small: str | int) -> None:
    with pytest.raises(InvalidArgument, match="Minimum memory limit allowed is 6MB"):
        with_memory_limit(small)


def test_memory_swap() -> None:
    spec = build_spec(with_memory_limit("64m"), with_memory_swap("128m"))
    assert _resources(spec)["memory"] == {"limit": 64 << 20, "swap": 128 << 20}
    unlimited = build_spec(with_memory_limit("64m"), with_memory_swap(-1))
    assert _resources(unlimited)["memory"]["swap"] == -1
    # Equal to the limit means no swap at all.
    build_spec(with_memory_limit("64m"), with_memory_swap("64m"))


def test_memory_reservation_is_a_soft_limit_below_the_hard_one() -> None:
    spec = build_spec(with_memory_limit("256m"), with_memory_reservation("128m"))
    assert _resources(spec)["memory"] == {"limit": 256 << 20, "reservation": 128 << 20}
    assert _resources(build_spec(with_memory_reservation("64m")))["memory"] == {
        "reservation": 64 << 20
    }
    with pytest.raises(InvalidArgument, match="less than memory reservation"):
        build_spec(with_memory_limit("64m"), with_memory_reservation("128m"))


def test_memory_swap_needs_limit_and_must_cover_it() -> None:
    with pytest.raises(InvalidArgument, match="memory limit"):
        build_spec(with_memory_swap("1g"))
    with pytest.raises(InvalidArgument, match="larger than memory limit"):
        build_spec(with_memory_limit("64m"), with_memory_swap("32m"))
    # Lowering the limit below an existing swap total is refused too.
    with pytest.raises(InvalidArgument, match="larger than memory limit"):
        build_spec(with_memory_limit("64m"), with_memory_swap("64m"), with_memory_limit("128m"))


@pytest.mark.parametrize(
    ("cpus", "quota"),
    [(1, 100000), (1.5, 150000), (0.01, 1000), (16, 1600000), (1024, 102400000)],
)
def test_cpus(cpus: float, quota: int) -> None:
    cpu = _resources(build_spec(with_cpus(cpus)))["cpu"]
    assert cpu == {"quota": quota, "period": 100000}


@pytest.mark.parametrize("bad", [0, -1, 0.001, 1024.01, 1e9, float("inf"), float("nan"), "1", True])
def test_cpus_rejects(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        with_cpus(bad)


def test_cpu_shares() -> None:
    assert _resources(build_spec(with_cpu_shares(512)))["cpu"] == {"shares": 512}
    for bad in (1, 262145, 0, "512", True):
        with pytest.raises(InvalidArgument):
            with_cpu_shares(bad)  # type: ignore[arg-type]


def test_cpus_and_shares_compose() -> None:
    cpu = _resources(build_spec(with_cpus(2), with_cpu_shares(256), with_cpuset("0-1")))["cpu"]
    assert cpu == {"quota": 200000, "period": 100000, "shares": 256, "cpus": "0-1"}


@pytest.mark.parametrize("good", ["0", "0-2", "0-2,4", "1,3,5-7", "0-0"])
def test_cpuset(good: str) -> None:
    cpu = _resources(build_spec(with_cpuset(good, "0")))["cpu"]
    assert cpu == {"cpus": good, "mems": "0"}


@pytest.mark.parametrize("bad", ["", "a", "0-", "-1", "2-1", "0,,1", "0 - 2", "1;2"])
def test_cpuset_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        with_cpuset(bad)
    with pytest.raises(InvalidArgument):
        with_cpuset(mems=bad)


def test_cpuset_needs_something() -> None:
    with pytest.raises(InvalidArgument):
        with_cpuset()


def test_pids_limit() -> None:
    assert _resources(build_spec(with_pids_limit(100)))["pids"] == {"limit": 100}
    assert _resources(build_spec(with_pids_limit(-1)))["pids"] == {"limit": -1}
    for bad in (0, -2, True, "10"):
        with pytest.raises(InvalidArgument):
            with_pids_limit(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/ctrexec/task-1", "/ctrexec/task-1"),
        ("/a//b/", "/a/b"),
        ("system.slice:ctrexec:task-1", "system.slice:ctrexec:task-1"),
        (":ctrexec:task-1", ":ctrexec:task-1"),
    ],
)
def test_cgroups_path(path: str, expected: str) -> None:
    assert build_spec(with_cgroups_path(path))["linux"]["cgroupsPath"] == expected


@pytest.mark.parametrize("bad", ["", "relative", "/a/../b", "a:b", "a:b:c:d", "/x\x00"])
def test_cgroups_path_rejects(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        with_cgroups_path(bad)
