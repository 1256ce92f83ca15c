"""What bench/soak counts after each phase, and the start/end table it prints.

A soak proves nothing unless everything a phase made is gone when it ends, so each
count reads the kernel, the filesystem or containerd directly, never ctrexec's labels.
Counts are taken only for what is the soak's own (its containerd, its bridge, subnet,
namespace prefix and directories): the machine is shared, and other engineers' tests
come and go meanwhile.

The parsers (:func:`iptables_count`, :func:`ipam_entries`, :func:`compare`,
:func:`table`) are pure, so tests/unit can check them without root.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from _common import cgroup_mounts, log_daemon_pids, memory_of, mount_points, shim_pids

from ctrexec import _rpc
from ctrexec._api.containerd.services.snapshots.v1 import snapshots_pb2
from ctrexec.containerd import containers
from ctrexec.containerd.client import Client

#: Counts that must come back exactly; the others are gauges (see :func:`compare`).
EXACT = (
    "containers", "snapshots", "leases", "netns", "veths", "ipam", "iptables", "mounts",
    "shims", "cgroups", "fds", "threads",
)  # fmt: skip
#: What a gauge may grow by and still count as back: an allocator keeps freed pages.
GAUGE_SLACK_KIB = 8 * 1024
GAUGE_SLACK_RATIO = 0.20
GAUGES = ("logd_rss_kib",)
ORDER = (*EXACT, *GAUGES)

_JUMP = re.compile(r"-j (CNI-[A-Za-z0-9_-]+)")


@dataclass(frozen=True)
class Where:
    """The soak's own objects: how each count tells them from everyone else's."""

    client: Client
    address: str  # the private containerd's socket (its shims name it)
    network: str  # the CNI network name (iptables comments, the IPAM subdirectory)
    bridge: str
    subnet_prefix: str  # "10.231.215." : every address and rule of the subnet has it
    netns_prefix: str  # "cx-soak": the pins of the soak's groups
    ipam_dir: Path
    mount_roots: tuple[Path, ...]  # containerd's root and state, the soak's tmp dir
    cgroup_rels: tuple[str, ...]  # cgroup paths relative to each hierarchy's mount


# -- pure -----------------------------------------------------------------------------


def iptables_count(save: str, subnet_prefix: str, network: str) -> int:
    """Rules of the soak's network in ``iptables-save`` text: lines naming its subnet or
    its CNI comment, plus the CNI chains those jump to (declaration and rules)."""
    comment = f'name: \\"{network}\\"'
    ours = [ln for ln in save.splitlines() if subnet_prefix in ln or comment in ln]
    chains = {m.group(1) for ln in ours for m in _JUMP.finditer(ln)}
    extra = [
        ln
        for ln in save.splitlines()
        if ln not in ours and any(ln.startswith((f":{c} ", f"-A {c} ")) for c in chains)
    ]
    return len(ours) + len(extra)


def ipam_entries(names: Iterable[str]) -> int:
    """host-local's reservations among a network directory's file names: one file per
    address (``last_reserved_ip.0`` and ``lock`` are bookkeeping)."""
    return sum(1 for n in names if _is_address(n))


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def back(start: int, end: int, key: str) -> bool:
    """Whether ``end`` counts as back at ``start``: equal for a count, within the slack
    for a gauge."""
    if key in GAUGES:
        return end <= start + max(GAUGE_SLACK_KIB, start * GAUGE_SLACK_RATIO)
    return end == start


def compare(start: Mapping[str, int], end: Mapping[str, int]) -> list[str]:
    """The keys whose end value is not back at the start value, in table order."""
    return [k for k in ORDER if k in start and not back(start[k], end.get(k, -1), k)]


Counts = Mapping[str, int]


def table(rows: Sequence[tuple[str, Counts, Counts, Counts]]) -> str:
    """One line per count, and per phase its start, peak and end columns (markdown,
    which also reads as plain text); a count not back at its start is marked ``!``."""
    head = "| count | " + " | ".join(f"{p}: start | peak | end" for p, *_ in rows) + " |"
    rule = "|---|" + "---:|---:|---:|" * len(rows)
    lines = [head, rule]
    for key in ORDER:
        cells = []
        for _, start, peak, end in rows:
            s, e = start.get(key), end.get(key)
            mark = "" if s is None or e is None or back(s, e, key) else " !"
            cells += [_cell(s), _cell(peak.get(key)), _cell(e) + mark]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


# -- reading the host -----------------------------------------------------------------


def _snapshots(client: Client) -> int:
    stream = client._connection.server_stream(
        _rpc.SNAPSHOTS,
        "List",
        snapshots_pb2.ListSnapshotsRequest(snapshotter="overlayfs"),
        snapshots_pb2.ListSnapshotsResponse,
        namespace=client.namespace,
    )
    return sum(len(page.info) for page in stream)


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _cgroups(rels: Sequence[str]) -> int:
    found = 0
    for mount in cgroup_mounts():
        for rel in rels:
            top = mount / rel
            if top.is_dir():
                found += sum(1 for _ in os.walk(top))
    return found


def _mounts(roots: Sequence[Path], netns_prefix: str) -> int:
    prefixes = tuple(str(r).rstrip("/") + "/" for r in roots)
    pins = f"/run/netns/{netns_prefix}"
    return sum(1 for m in mount_points() if m.startswith(prefixes) or m.startswith(pins))


def _iptables(where: Where) -> int:
    total = 0
    for table_name in ("nat", "filter"):
        done = subprocess.run(
            ["iptables-save", "-t", table_name], capture_output=True, text=True, check=False
        )
        total += iptables_count(done.stdout, where.subnet_prefix, where.network)
    return total


def _self_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return -1


def counts(where: Where) -> dict[str, int]:
    """Every count now (see docs/reliability.md for what each means)."""
    readers: dict[str, Callable[[], int]] = {
        "containers": lambda: len(containers.list_containers(where.client)),
        "snapshots": lambda: _snapshots(where.client),
        "leases": lambda: len(where.client.leases()),
        "netns": lambda: sum(
            1 for n in _listdir(Path("/run/netns")) if n.startswith(where.netns_prefix)
        ),
        "veths": lambda: len(_listdir(Path(f"/sys/class/net/{where.bridge}/brif"))),
        "ipam": lambda: ipam_entries(_listdir(where.ipam_dir / where.network)),
        "iptables": lambda: _iptables(where),
        "mounts": lambda: _mounts(where.mount_roots, where.netns_prefix),
        "shims": lambda: len(shim_pids(where.address)),
        "cgroups": lambda: _cgroups(where.cgroup_rels),
        "fds": lambda: len(_listdir(Path("/proc/self/fd"))) - 1,  # less listdir's own
        "threads": lambda: _self_status("Threads"),
        "logd_rss_kib": lambda: memory_of(log_daemon_pids()).rss,
    }
    return {key: read() for key, read in readers.items()}
