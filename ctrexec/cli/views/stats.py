"""``stats`` as docker prints it: its columns, its units and ``--format`` templates.

A row has docker's fields (``.Container .Name .ID .CPUPerc .MemUsage .MemPerc .NetIO
.BlockIO .PIDs``), each already text as docker's formatter makes it: memory in
1024-based units with four significant digits (``1.52MiB / 7.63GiB``), I/O in
1000-based ones with three (``1.2kB / 648B``). A task without a memory limit shows the
host's memory as its limit, as docker does.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ctrexec import Stats
from ctrexec.cli.views import gotemplate
from ctrexec.cli.views.images import human_size, scaled
from ctrexec.cli.views.ps import render, table_template

#: ``stats --format`` fields and the header ``table`` prints for each.
STATS_HEADERS = {
    "Container": "CONTAINER",
    "Name": "NAME",
    "ID": "CONTAINER ID",
    "CPUPerc": "CPU %",
    "MemUsage": "MEM USAGE / LIMIT",
    "MemPerc": "MEM %",
    "NetIO": "NET I/O",
    "BlockIO": "BLOCK I/O",
    "PIDs": "PIDS",
}
#: ctrexec's names are its ids, so the NAME column stands for docker's first two.
STATS_DEFAULT = (
    "table {{.Name}}\t{{.CPUPerc}}\t{{.MemUsage}}\t{{.MemPerc}}"
    "\t{{.NetIO}}\t{{.BlockIO}}\t{{.PIDs}}"
)
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


@attrs.frozen
class StatsRow:
    """One task's reading: containerd's metrics, the CPU % between two readings, its
    network namespace's counters (None: unknown), and the host's memory."""

    name: str
    stats: Stats
    cpu_percent: float
    net: tuple[int, int] | None
    host_memory: int


def bytes_size(n: float) -> str:
    """docker's (go-units') BytesSize: four significant digits of 1024-based units."""
    return scaled(n, 1024, _BINARY_UNITS, 4)


def _fields(row: StatsRow) -> dict[str, object]:
    s = row.stats
    limit = s.memory_limit or row.host_memory
    used = s.memory_working_set
    net = f"{human_size(row.net[0])} / {human_size(row.net[1])}" if row.net else "--"
    return {
        "Container": row.name,
        "Name": row.name,
        "ID": row.name,  # whole, as ps's: a name's first 12 characters may not be unique
        "CPUPerc": f"{row.cpu_percent:.2f}%",
        "MemUsage": f"{bytes_size(used)} / {bytes_size(limit)}",
        "MemPerc": f"{used / limit * 100:.2f}%" if limit else "--",
        "NetIO": net,
        "BlockIO": f"{human_size(s.block_read_bytes)} / {human_size(s.block_write_bytes)}",
        "PIDs": str(s.pids_current),
    }


def stats_template(template: str) -> tuple[bool, gotemplate.Template]:
    """Parsed, and unknown fields refused, before the first reading."""
    table, parsed = table_template(template)
    for name in sorted(parsed.root_fields() - set(STATS_HEADERS)):
        names = ", ".join(f".{f}" for f in STATS_HEADERS)
        raise gotemplate.TemplateError(f"stats --format: unknown field .{name} (known: {names})")
    return table, parsed


def stats_lines(rows: Sequence[StatsRow], template: str) -> list[str]:
    """The lines of one reading; a ``table`` template's aligned under its header."""
    table, parsed = stats_template(template)
    return render(parsed, [_fields(r) for r in rows], STATS_HEADERS if table else None)
