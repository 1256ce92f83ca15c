"""cgroup limits: memory, CPU, cpuset, pids, and the cgroup path.

Values are written in the OCI form, which runc maps onto cgroup v1 or v2 by
itself (shares become ``cpu.weight``, ``memory.swap`` becomes
``memory.swap.max`` = swap - limit). For that reason we only set fields that
mean the same on both: no kernel memory, no swappiness.

Sizes accept docker's spelling: a number of bytes or a number with a binary
unit, ``512m``, ``1g``, ``100k``, ``1.5g``, ``64mb``.
"""

from __future__ import annotations

import math
import posixpath
import re

from ctrexec.errors import InvalidArgument
from ctrexec.oci._base import Spec, SpecOpt, mutating, resources_of

#: Docker refuses smaller limits: the runtime itself needs a few MiB to start.
MIN_MEMORY_BYTES = 6 * 1024 * 1024

#: CFS period used for ``with_cpus``: 100 ms, the kernel's and docker's default.
CPU_PERIOD_US = 100_000

#: ``--cpus`` bounds: 0.01 is the smallest quota worth having (1 ms a period); the
#: top is a sanity bound, far above any host, so a typo such as 1e9 is caught.
MIN_CPUS = 0.01
MAX_CPUS = 1024

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_SYSTEMD_CGROUP = re.compile(r"^[A-Za-z0-9_.@\\-]*:[A-Za-z0-9_.@\\-]+:[A-Za-z0-9_.@\\-]+$")


def parse_size(value: str | int) -> int:
    """Parse a docker size (``"512m"``, ``"1g"``, ``"100k"``, ``4096``) into bytes."""
    if isinstance(value, bool):
        raise InvalidArgument(f"invalid size {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgument(f"size must not be negative: {value}")
        return value
    if not isinstance(value, str):
        raise InvalidArgument(f"invalid size {value!r}")
    match = _SIZE.match(value)
    if not match:
        raise InvalidArgument(f"invalid size {value!r} (expected e.g. 512m, 1g, 100k or bytes)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def check_memory_limit(limit: str | int) -> int:
    """A memory limit in bytes (from bytes or a docker size); at least 6 MiB."""
    size = parse_size(limit)
    if size < MIN_MEMORY_BYTES:
        raise InvalidArgument(f"Minimum memory limit allowed is 6MB, got {size} bytes")
    return size


def with_memory_limit(limit: str | int) -> SpecOpt:
    """Limit the task's memory (bytes or a docker size); at least 6 MiB."""
    size = check_memory_limit(limit)

    def apply(spec: Spec) -> None:
        memory = resources_of(spec).setdefault("memory", {})
        swap = memory.get("swap")
        if swap is not None and swap != -1 and swap < size:
            raise InvalidArgument("Minimum memoryswap limit should be larger than memory limit")
        memory["limit"] = size

    return mutating(apply)


def with_memory_reservation(reservation: str | int) -> SpecOpt:
    """A soft memory limit, like ``docker run --memory-reservation``: the kernel reclaims
    down to it under pressure (cgroup v2 ``memory.low``); below the hard limit, if any."""
    size = parse_size(reservation)

    def apply(spec: Spec) -> None:
        memory = resources_of(spec).setdefault("memory", {})
        limit = memory.get("limit")
        if limit is not None and size > limit:
            raise InvalidArgument(
                "Minimum memory limit can not be less than memory reservation limit"
            )
        memory["reservation"] = size

    return mutating(apply)


def parse_memory_swap(total: str | int) -> int:
    """``--memory-swap``: a size in bytes, or -1 for unlimited swap."""
    return -1 if total in (-1, "-1") else parse_size(total)


def parse_shm_size(size: str | int) -> int:
    """``--shm-size``: a size in bytes above 0."""
    value = parse_size(size)
    if value <= 0:
        raise InvalidArgument("shm size must be above 0")
    return value


def with_memory_swap(total: str | int) -> SpecOpt:
    """Limit memory plus swap, like ``docker run --memory-swap``; -1 is unlimited.

    Needs a memory limit first (the total only means something relative to it),
    and must be at least that limit; equal means no swap.
    """
    size = parse_memory_swap(total)

    def apply(spec: Spec) -> None:
        memory = resources_of(spec).setdefault("memory", {})
        limit = memory.get("limit")
        if limit is None:
            raise InvalidArgument("set a memory limit before a memory+swap limit")
        if size != -1 and size < limit:
            raise InvalidArgument("Minimum memoryswap limit should be larger than memory limit")
        memory["swap"] = size

    return mutating(apply)


def with_cpus(cpus: float) -> SpecOpt:
    """Allow ``cpus`` CPUs' worth of time (``--cpus``): quota/period with a 100 ms period."""
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not math.isfinite(cpus):
        raise InvalidArgument(f"invalid CPU count {cpus!r}")
    quota = round(cpus * CPU_PERIOD_US)
    if not round(MIN_CPUS * CPU_PERIOD_US) <= quota <= MAX_CPUS * CPU_PERIOD_US:
        raise InvalidArgument(f"CPU count must be between {MIN_CPUS} and {MAX_CPUS}, got {cpus}")

    def apply(spec: Spec) -> None:
        cpu = resources_of(spec).setdefault("cpu", {})
        cpu["quota"] = quota
        cpu["period"] = CPU_PERIOD_US

    return mutating(apply)


def with_cpu_shares(shares: int) -> SpecOpt:
    """Set the relative CPU weight (``--cpu-shares``, 2..262144; 1024 is normal)."""
    if isinstance(shares, bool) or not isinstance(shares, int) or not 2 <= shares <= 262144:
        raise InvalidArgument(f"CPU shares must be between 2 and 262144, got {shares!r}")

    def apply(spec: Spec) -> None:
        resources_of(spec).setdefault("cpu", {})["shares"] = shares

    return mutating(apply)


def check_cpu_list(value: str, what: str) -> str:
    """Validate a kernel CPU/node list such as ``0-2,4``; ranges must ascend."""
    if not isinstance(value, str) or not _CPU_LIST.match(value):
        raise InvalidArgument(f"invalid {what} {value!r} (expected a list such as 0-2,4)")
    for part in value.split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            raise InvalidArgument(f"invalid {what} {value!r}: range {part} is backwards")
    return value


def with_cpuset(cpus: str | None = None, mems: str | None = None) -> SpecOpt:
    """Pin the task to CPUs ``cpus`` and memory nodes ``mems`` (``--cpuset-*``)."""
    if cpus is None and mems is None:
        raise InvalidArgument("with_cpuset needs cpus, mems or both")
    checked_cpus = check_cpu_list(cpus, "cpuset cpus") if cpus is not None else None
    checked_mems = check_cpu_list(mems, "cpuset mems") if mems is not None else None

    def apply(spec: Spec) -> None:
        cpu = resources_of(spec).setdefault("cpu", {})
        if checked_cpus is not None:
            cpu["cpus"] = checked_cpus
        if checked_mems is not None:
            cpu["mems"] = checked_mems

    return mutating(apply)


def with_pids_limit(limit: int) -> SpecOpt:
    """Cap the number of processes and threads; -1 means unlimited.

    0 is refused rather than guessed at: docker reads it as unlimited, the
    kernel as "none at all".
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or (limit < 1 and limit != -1):
        raise InvalidArgument(f"pids limit must be a positive number or -1, got {limit!r}")

    def apply(spec: Spec) -> None:
        resources_of(spec)["pids"] = {"limit": limit}

    return mutating(apply)


def check_cgroups_path(path: str) -> str:
    """Validate a cgroups path: absolute cgroupfs, or systemd's ``slice:prefix:name``."""
    if not isinstance(path, str) or not path:
        raise InvalidArgument("cgroups path must be a non-empty string")
    if _SYSTEMD_CGROUP.match(path):
        return path
    if not path.startswith("/") or ".." in path.split("/") or "\x00" in path:
        raise InvalidArgument(
            f"cgroups path {path!r} must be absolute without '..', or slice:prefix:name"
        )
    return "/" + posixpath.normpath(path).lstrip("/")


def check_cgroupfs_path(path: str) -> str:
    """A cgroupfs path someone else names (no systemd form): absolute, normal, and
    with no ``..``, so it stays under the hierarchy's root."""
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or path == "/"
        or ".." in path.split("/")
        or "\x00" in path
        or posixpath.normpath(path) != path
    ):
        raise InvalidArgument(f"cgroup path {path!r} must be absolute and normal, without '..'")
    return path


def with_cgroups_path(path: str) -> SpecOpt:
    """Put the task's cgroup at ``path`` (the executor uses ``/<namespace>/<id>``)."""
    checked = check_cgroups_path(path)

    def apply(spec: Spec) -> None:
        spec.setdefault("linux", {})["cgroupsPath"] = checked

    return mutating(apply)
