"""Helpers shared by bench/run and its peers: commands, timing, processes, memory, cleanup.

Standard library only, and nothing from ctrexec: the audit of what a run leaves behind
must not depend on the code being measured.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SHIM_NAME = "containerd-shim-runc-v2"
LOGDRIVER_NAME = "ctrexec-logdriver"
KIB_PER_MIB = 1024
NA = "-"  # not applicable to this column


@contextlib.contextmanager
def checkout(root: Path, rev: str) -> Iterator[Path]:
    """Revision ``rev`` of the repository at ``root``, as a worktree removed after: the A
    side of an A/B run (bench/cli-ab, bench/wired-ab)."""
    with tempfile.TemporaryDirectory(prefix="ctrexec-ab-") as tmp:
        where = Path(tmp) / "a"
        git = ["git", "-C", str(root), "worktree"]
        subprocess.run([*git, "add", "-q", "--detach", str(where), rev], check=True)
        try:
            yield where
        finally:
            subprocess.run([*git, "remove", "--force", str(where)], check=False)


class BenchError(Exception):
    """A step of the benchmark failed; the message says which."""


def run(cmd: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def run_parallel(cmds: Sequence[Sequence[str]], env: dict[str, str] | None = None) -> None:
    """Start every command at once, then wait for all; any failure is a BenchError."""
    procs = [
        subprocess.Popen(
            list(c), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        for c in cmds
    ]
    failed = []
    for cmd, proc in zip(cmds, procs, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(f"{' '.join(cmd)} exited {proc.returncode}: {err.strip()}")
    if failed:
        raise BenchError(f"{len(failed)} of {len(cmds)} failed; first: {failed[0]}")


def ctr_remove(ctr: Callable[..., list[str]], names: Sequence[str]) -> None:
    """``ctr``'s removal of N (``ctr(*args)`` is its argv on the bench's daemon and
    namespace): SIGKILL to every task, their deletes, the containers'."""
    if not names:
        return
    with contextlib.suppress(BenchError):  # a task that already exited
        run(ctr("tasks", "kill", "-s", "SIGKILL", *names))
    run(ctr("tasks", "rm", "-f", *names))
    run(ctr("containers", "rm", *names))


def timed_ms(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (p90 of 10 samples is the 9th smallest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_ms(values: Sequence[float] | None, kind: str) -> str:
    if not values:
        return NA
    value = statistics.median(values) if kind == "median" else percentile(values, 90)
    return f"{value:.0f}"


def fmt_mib(kib: float | None) -> str:
    return NA if kib is None else f"{kib / KIB_PER_MIB:.1f}"


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


class Recorder:
    """Counts gRPC calls and sums their seconds, by method; thread-safe (set as a
    connection's ``observer``: bench/profile-start, bench/profile-burst)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: collections.Counter[str] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()

    def __call__(self, method: str, seconds: float) -> None:
        with self.lock:
            self.count[method] += 1
            self.seconds[method] += seconds

    def reset(self) -> None:
        with self.lock:
            self.count.clear()
            self.seconds.clear()


# -- processes and memory ------------------------------------------------------------


@dataclass(frozen=True)
class Mem:
    """Summed memory of a set of processes, in KiB."""

    count: int
    rss: int
    pss: int
    dirty: int  # Private_Dirty: heap, stacks; not shared whatever else runs


EMPTY = Mem(count=0, rss=0, pss=0, dirty=0)


@dataclass(frozen=True)
class MemResult:
    """One memory scenario: our shims, our log drivers, extra processes (docker's
    pause), and the runc shims on the host that are not ours."""

    shims: Mem
    drivers: Mem
    other_shims: int
    extra: Mem = EMPTY


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    # comm (field 2) may hold spaces; fields after its closing paren are plain.
    return int(stat.rsplit(")", 1)[1].split()[1])


def pids() -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def shim_pids(address: str | None) -> list[int]:
    """Long-lived runc v2 shims serving the containerd at ``address`` (None: any)."""
    found = []
    for pid in pids():
        argv = cmdline(pid)
        if not argv or not any(SHIM_NAME in a for a in argv[:1]):
            continue
        pairs = itertools.pairwise(argv)
        ours = address is None or ("-address", address) in pairs
        if ours and argv[-1] not in ("start", "delete"):
            found.append(pid)
    return sorted(found)


def logdriver_pids(parents: Sequence[int]) -> list[int]:
    """ctrexec log drivers whose parent is one of ``parents`` (our shims)."""
    wanted = set(parents)
    return sorted(
        pid
        for pid in pids()
        if any(LOGDRIVER_NAME in a for a in cmdline(pid)) and ppid(pid) in wanted
    )


def log_daemon_pids() -> list[int]:
    """The shared log daemon of the benchmark's own state directory, if it runs."""
    from ctrexec.logs import client as logdaemon_client
    from ctrexec.logs import daemon as logdaemon

    try:
        pid = int((logdaemon_client.state_dir() / logdaemon.PIDFILE).read_text())
    except (OSError, ValueError):
        return []
    return [pid] if any(logdaemon.NAME in a for a in cmdline(pid)) else []


def memory_of(pid_list: Sequence[int]) -> Mem:
    rss = pss = dirty = count = 0
    for pid in pid_list:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # exited meanwhile
        fields: dict[str, int] = {}
        for line in text.splitlines()[1:]:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[key] = int(parts[0])
        rss += fields.get("Rss", 0)
        pss += fields.get("Pss", 0)
        dirty += fields.get("Private_Dirty", 0)
        count += 1
    return Mem(count=count, rss=rss, pss=pss, dirty=dirty)


# -- host objects --------------------------------------------------------------------


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def mount_points() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        out.append(_unescape(line.split()[4]))
    return out


def mounts_under(base: Path) -> list[str]:
    prefix = str(base).rstrip("/") + "/"
    return [m for m in mount_points() if m == str(base) or m.startswith(prefix)]


def cgroup_mounts() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies and of cgroup2."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        if rest.split()[:1] in (["cgroup"], ["cgroup2"]):
            found.append(Path(fields.split()[4]))
    return found


def remove_cgroups(relatives: Sequence[str]) -> list[str]:
    """rmdir the (empty) cgroups under each relative path; return what stays.

    runc removes a task's own cgroup; its parents (``/ctrexec-bench`` for ctr,
    ``/ctrexec/ctrexec-bench`` for ctrexec, docker's ``--cgroup-parent``) stay. Only
    ours are touched, and rmdir refuses a cgroup that has processes.
    """
    left = []
    for mount in cgroup_mounts():
        for rel in relatives:
            top = mount / rel
            if not top.is_dir():
                continue
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                try:
                    os.rmdir(dirpath)
                except FileNotFoundError:
                    pass  # co-mounted hierarchies: already gone through another mount
                except OSError as exc:
                    left.append(f"cgroup {dirpath}: {exc.strerror}")
    return left


def netns_files(prefix: str) -> list[str]:
    run_dir = Path("/run/netns")
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(prefix))


def remove_netns_files(prefix: str) -> list[str]:
    """``ip netns del`` what a failed step left under /run/netns; return what stays."""
    left = []
    for name in netns_files(prefix):
        proc = subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        if proc.returncode != 0:
            left.append(f"netns {name}: {proc.stderr.decode(errors='replace').strip()}")
    return left


def host_links() -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir()}
