"""The processes of a task, read from /proc on the host, for ``ctrexec top``.

docker's ``top`` runs ``ps`` on the host over the container's pids rather than inside
the container, whose image may have no ``ps`` at all. The pids are those of the task's
cgroup (its init process's, so execs are included) and each row is read from
``/proc/PID``; a process that exits meanwhile is left out, not an error.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs

from ctrexec import procfs
from ctrexec._linux import CGROUP_ROOT
from ctrexec.errors import FailedPrecondition, InvalidArgument

PROC = Path("/proc")


@attrs.frozen
class Proc:
    """One row of ``top``: ids, owner, CPU time and the command line."""

    pid: int
    ppid: int
    uid: int
    cpu_seconds: float
    command: str

    @property
    def user(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


def cgroup_pids(init_pid: int) -> list[int]:
    """Every pid in the cgroup of ``init_pid``: v2, or v1's pids/freezer/memory hierarchy."""
    cgroups = procfs.proc_cgroups(init_pid)
    if cgroups is None:
        raise FailedPrecondition(f"process {init_pid} is gone")
    for procs in _procs_files(cgroups):
        try:
            return sorted(int(p) for p in procs.read_text().split())
        except OSError:
            continue
    return [init_pid]


def _procs_files(cgroups: dict[str, str]) -> list[Path]:
    """Where the cgroup's member list may be, most likely first (hybrid hosts have both)."""
    paths = {name: path.lstrip("/") for name, path in cgroups.items()}
    found = []
    if "" in paths:
        found += [CGROUP_ROOT / paths[""], CGROUP_ROOT / "unified" / paths[""]]
    found += [CGROUP_ROOT / c / paths[c] for c in ("pids", "freezer", "memory") if c in paths]
    return [f / "cgroup.procs" for f in found]


def read(pid: int) -> Proc | None:
    """The row for ``pid``, None once it exited."""
    base = PROC / str(pid)
    stat = procfs.proc_stat(pid)
    try:
        cmdline = (base / "cmdline").read_bytes()
        uid = base.stat().st_uid
    except OSError:
        return None
    if stat is None:
        return None
    comm, fields = stat
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    args = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    return Proc(pid, int(fields[1]), uid, cpu, " ".join(args) if args else f"[{comm}]")


def of_task(init_pid: int) -> list[Proc]:
    return [p for pid in cgroup_pids(init_pid) if (p := read(pid)) is not None]


def ps_table(init_pid: int, options: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """``top NAME OPTIONS``: the host's ``ps OPTIONS``, its rows cut to the task's pids.

    docker's way: the header must have a PID column (else ``Couldn't find PID field in
    ps output``); a row's words past the last title are its last column, so a command
    with spaces stays one cell. ``ps``'s own errors are the user's (bad options).
    """
    pids = set(cgroup_pids(init_pid))
    try:
        out = subprocess.run(
            ["ps", *options], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FailedPrecondition(f"ps: {exc}") from exc
    if out.returncode != 0:
        raise InvalidArgument(f"ps: {out.stderr.strip() or out.stdout.strip()}")
    lines = out.stdout.splitlines()
    titles = lines[0].split() if lines else []
    if "PID" not in titles:
        raise InvalidArgument("Couldn't find PID field in ps output")
    at, last = titles.index("PID"), len(titles) - 1
    rows = []
    for line in lines[1:]:
        words = line.split(None, last)
        if len(words) > at and words[at].isdigit() and int(words[at]) in pids:
            rows.append(words + [""] * (len(titles) - len(words)))
    return titles, rows


def net_io(pid: int) -> tuple[int, int] | None:
    """Bytes received and sent in the network namespace of ``pid``, over its interfaces
    but loopback (docker's NET I/O); None once the process is gone."""
    try:
        lines = (PROC / str(pid) / "net" / "dev").read_text().splitlines()[2:]
    except OSError:
        return None
    rx = tx = 0
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() != "lo" and len(fields) >= 9:
            rx, tx = rx + int(fields[0]), tx + int(fields[8])
    return rx, tx
