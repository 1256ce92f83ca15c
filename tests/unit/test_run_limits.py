"""--ulimit, --shm-size and --memory-swap: docker's syntax, rules and errors, and their spec."""

from __future__ import annotations

import pytest

from ctrexec.errors import InvalidArgument, InvalidField
from ctrexec.oci import build_spec, mounts, process
from ctrexec.tasks import spec as taskspec
from ctrexec.tasks.config import TaskConfig

INFINITY = 2**64 - 1


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("nofile=1024:4096", ("RLIMIT_NOFILE", 1024, 4096)),
        ("nproc=100", ("RLIMIT_NPROC", 100, 100)),
        ("core=-1", ("RLIMIT_CORE", INFINITY, INFINITY)),
        ("memlock=64:-1", ("RLIMIT_MEMLOCK", 64, INFINITY)),
    ],
)
def test_parse_ulimit(text: str, parsed: tuple[str, int, int]) -> None:
    assert process.parse_ulimit(text) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nofile", "invalid ulimit argument: nofile"),
        ("as=1", "invalid ulimit type: as"),
        ("NOFILE=1", "invalid ulimit type: NOFILE"),
        (
            "nofile=1:2:3",
            "too many limit value arguments - 1:2:3, can only have up to two, `soft[:hard]`",
        ),
        ("nofile=4:2", "ulimit soft limit must be less than or equal to hard limit: 4 > 2"),
        ("nofile=lots", 'invalid ulimit value "lots" in nofile=lots'),
        ("nofile=-2", 'invalid ulimit value "-2" in nofile=-2: -1 is unlimited'),
    ],
)
def test_parse_ulimit_errors_are_dockers(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        process.parse_ulimit(text)
    assert str(info.value) == message


def test_a_later_ulimit_of_a_name_wins() -> None:
    assert process.check_ulimits(["nofile=1:2", "core=0", "nofile=3"]) == {
        "RLIMIT_NOFILE": (3, 3),
        "RLIMIT_CORE": (0, 0),
    }


def test_shm_size_sets_the_dev_shm_tmpfs_size() -> None:
    spec = build_spec(mounts.with_shm_size(1 << 30))
    (shm,) = [m for m in spec["mounts"] if m["destination"] == "/dev/shm"]
    assert shm["options"] == ["nosuid", "noexec", "nodev", "mode=1777", f"size={1 << 30}"]
    with pytest.raises(InvalidArgument):
        mounts.with_shm_size(0)


def test_memory_bytes_is_the_limit_in_bytes_or_none() -> None:
    """inspect's ``HostConfig.Memory`` and a scheduler's accounting read it; docker's
    sizes and a plain count give the same number."""
    assert TaskConfig(name="t", image="img", memory="512m").memory_bytes == 512 << 20
    assert TaskConfig(name="t", image="img", memory=8 << 20).memory_bytes == 8 << 20
    assert TaskConfig(name="t", image="img").memory_bytes is None


def test_memory_swap_needs_memory_and_at_least_it() -> None:
    with pytest.raises(InvalidField) as info:
        TaskConfig(name="t", image="img", memory_swap="1g")
    assert info.value.reason == (
        "You should always set the Memory limit when using Memoryswap limit, see usage"
    )
    low = TaskConfig(name="t", image="img", memory="1g", memory_swap="512m")
    with pytest.raises(InvalidField) as info:
        taskspec.check_config(low)
    assert info.value.field == "memory_swap"
    assert "Minimum memoryswap limit should be larger than memory limit" in info.value.reason
    for swap in ("-1", -1, "1g", "2g"):
        taskspec.check_config(TaskConfig(name="t", image="img", memory="1g", memory_swap=swap))
