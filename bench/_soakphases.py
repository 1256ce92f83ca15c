"""bench/soak's three phases, each driving ctrexec through its library only.

Every phase removes what it made before it returns; bench/soak then waits for every
count to come back (see :mod:`_soakcount`). A phase records failures instead of
stopping at the first, so one run says how many of its operations failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from _common import BenchError

from ctrexec.containerd.daemon import EmbeddedContainerd
from ctrexec.containerd.tasks import Status
from ctrexec.errors import CtrexecError
from ctrexec.groups.spec import GroupSpec, parse_group
from ctrexec.groups.supervisor import Supervisor
from ctrexec.groups.updown import Groups
from ctrexec.net import groupns
from ctrexec.tasks.config import TaskConfig
from ctrexec.tasks.executor import Executor

IMAGE = "docker.io/library/ctrexec-test:latest"
SLEEP = ("sleep", "600")
PREFIX = "soak"
MEMBERS = ("a", "b")
#: How long a group may take to be sound again after containerd came back.
SOUND_TIMEOUT = 120.0
#: A cycling worker gives up after this many failed cycles (the run is failed anyway).
MAX_FAILURES = 5
#: A line on stderr every so many cycles, so a long run shows it is moving.
PROGRESS_EVERY = 100


@dataclass
class Phase:
    """What one phase measured: samples in ms by name, failures in words, notes."""

    name: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The counts at the phase's busiest moment (all its tasks up): proof they count.
    peak: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, ms: float) -> None:
        self.samples.setdefault(key, []).append(ms)


@dataclass
class Soak:
    """What the phases drive: the library objects and the private containerd."""

    daemon: EmbeddedContainerd
    ex: Executor
    groups: Groups
    lock_dir: Path
    #: Reads every count now (see _soakcount.counts).
    probe: Callable[[], dict[str, int]]


def group_spec(name: str, *, restart: bool = False, port: int | None = None) -> GroupSpec:
    """The soak's 2-task bridged group: two sleepers sharing one namespace, SIGKILLed on
    stop (the stop's wait is not what is measured), with a published port if asked."""
    task: dict[str, object] = {"image": IMAGE, "command": list(SLEEP), "stop_signal": "SIGKILL"}
    if restart:
        task["restart"] = {"policy": "always", "delay": 0.1}
    data: dict[str, object] = {
        "name": name,
        "network": "bridge",
        "task": [{"name": m, **task} for m in MEMBERS],
    }
    if port is not None:
        data["ports"] = [f"127.0.0.1:{port}:8080"]
    return parse_group(data, source=f"soak group {name}")


def free_port() -> int:
    """A host port free now, for a group's published port (a group file names its own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


# -- 1. tasks started at once ------------------------------------------------------------


def tasks_at_once(s: Soak, n: int) -> Phase:
    """``n`` tasks, each started by its own thread, all released by one barrier."""
    phase = Phase(f"{n} tasks at once")
    ids = [f"{PREFIX}-t{i}" for i in range(n)]
    gate = threading.Barrier(n)

    def start(task_id: str) -> None:
        gate.wait()
        t0 = time.perf_counter()
        try:
            s.ex.start_task(TaskConfig(name=task_id, image=IMAGE, command=SLEEP, netns="none"))
        except CtrexecError as exc:
            phase.failures.append(f"start {task_id}: {exc}")
            return
        phase.add("start", _ms_since(t0))

    t_all = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        list(pool.map(start, ids))
    phase.add("all started", _ms_since(t_all))
    phase.peak = s.probe()
    running = {i.id for i in s.ex.list() if i.status is Status.RUNNING}
    phase.failures += [f"{i} not running after its start" for i in ids if i not in running]
    _destroy_all(s.ex, ids, phase)
    return phase


def _destroy_all(ex: Executor, ids: list[str], phase: Phase) -> None:
    def destroy(task_id: str) -> None:
        t0 = time.perf_counter()
        try:
            ex.destroy(task_id, force=True)
        except CtrexecError as exc:
            phase.failures.append(f"destroy {task_id}: {exc}")
            return
        phase.add("destroy", _ms_since(t0))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(destroy, ids))


# -- 2. group cycles -------------------------------------------------------------------


def group_cycles(s: Soak, cycles: int, workers: int) -> Phase:
    """``cycles`` up/down cycles of the 2-task bridged group, shared among ``workers``
    threads, each cycling a group of its own (each with a published port)."""
    phase = Phase(f"{cycles} group cycles ({workers} at a time)")
    shares = [cycles // workers + (1 if w < cycles % workers else 0) for w in range(workers)]

    def work(w: int) -> None:
        spec = group_spec(f"{PREFIX}-c{w}", port=free_port())
        failed = 0
        for i in range(shares[w]):
            if not _cycle(s, spec, phase, probe=w == 0 and i == shares[w] // 2):
                failed += 1
                if failed >= MAX_FAILURES:
                    phase.failures.append(f"worker {w}: gave up after {failed} failed cycles")
                    return

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(work, range(workers)))
    done = len(phase.samples.get("down", []))
    minutes = (time.perf_counter() - t0) / 60
    phase.notes.append(f"{done} cycles done, {done / minutes:.0f} cycles/min")
    return phase


def _cycle(s: Soak, spec: GroupSpec, phase: Phase, *, probe: bool = False) -> bool:
    """One create+start (``up``) and stop+delete (``down``); False when it failed."""
    t0 = time.perf_counter()
    try:
        infos = s.groups.up(spec)
        up_ms = _ms_since(t0)
        running = [i for i in infos if i.status is Status.RUNNING]
        if len(running) != len(MEMBERS):
            phase.failures.append(f"up {spec.name}: {len(running)} of {len(MEMBERS)} running")
        phase.add("up", up_ms)
        if probe:
            phase.peak = s.probe()
        t1 = time.perf_counter()
        s.groups.down(spec.name)
        phase.add("down", _ms_since(t1))
        done = len(phase.samples["down"])
        if done % PROGRESS_EVERY == 0:
            print(f"  {done} cycles", file=sys.stderr)
    except CtrexecError as exc:
        phase.failures.append(f"cycle of {spec.name}: {exc}")
        with contextlib.suppress(CtrexecError):
            s.groups.down(spec.name)
        return False
    return True


# -- 3. containerd restarts under the supervisor ---------------------------------------


def restarts(s: Soak, count: int, groups: int) -> Phase:
    """``groups`` groups up (restart always) and a supervisor serving them; ``count``
    times containerd is stopped and started again, and every group must be sound after.
    Then one member is SIGKILLed: the supervisor (reconnected) must start it again,
    into its group's namespace."""
    phase = Phase(f"{count} containerd restarts, {groups} groups")
    specs = [group_spec(f"{PREFIX}-r{i}", restart=True) for i in range(groups)]
    for spec in specs:
        s.groups.up(spec)
    sup = Supervisor(s.ex, reconnect_delay=0.2, lock_dir=s.lock_dir)
    stop = threading.Event()
    runner = threading.Thread(target=sup.run, args=(stop,), name="soak-supervisor", daemon=True)
    runner.start()
    try:
        _wait_sound(s, specs, phase, "before the first restart")
        phase.peak = s.probe()
        for r in range(count):
            _restart_containerd(s.daemon, phase)
            t0 = time.perf_counter()
            if not _wait_sound(s, specs, phase, f"after restart {r + 1}"):
                continue
            phase.add("sound again", _ms_since(t0))
            victim = specs[r % len(specs)]
            _kill_member(s, victim, phase, r + 1)
            t1 = time.perf_counter()
            if _wait_sound(s, specs, phase, f"after the kill of restart {r + 1}"):
                phase.add("member restarted", _ms_since(t1))
        phase.notes.append(f"supervisor restarts: {sup.restarts}")
    finally:
        stop.set()
        runner.join(timeout=60)
        if runner.is_alive():
            phase.failures.append("the supervisor did not stop within 60 s")
        for spec in specs:
            try:
                s.groups.down(spec.name)
            except CtrexecError as exc:
                phase.failures.append(f"down {spec.name}: {exc}")
    return phase


def _restart_containerd(daemon: EmbeddedContainerd, phase: Phase) -> None:
    """SIGTERM (what ``systemctl restart`` sends), wait for the exit, start again on the
    same directories: the shims and their tasks stay up meanwhile."""
    pid = daemon.pid()
    if pid is None:
        raise BenchError("the private containerd is not running")
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while daemon.is_running():
        if time.monotonic() > deadline:
            raise BenchError(f"containerd {pid} did not exit within 30 s of SIGTERM")
        time.sleep(0.05)
    daemon.start()
    phase.add("containerd restart", _ms_since(t0))


def _kill_member(s: Soak, spec: GroupSpec, phase: Phase, r: int) -> None:
    task_id = spec.task_id(MEMBERS[0])
    try:
        s.ex.signal(task_id, "SIGKILL")
    except CtrexecError as exc:
        phase.failures.append(f"restart {r}: SIGKILL {task_id}: {exc}")


def _wait_sound(s: Soak, specs: list[GroupSpec], phase: Phase, when: str) -> bool:
    deadline = time.monotonic() + SOUND_TIMEOUT
    problems: list[str] = []
    while time.monotonic() < deadline:
        problems = unsound(s.ex, specs)
        if not problems:
            return True
        time.sleep(0.2)
    phase.failures.append(f"{when}: not sound after {SOUND_TIMEOUT:g} s: {problems[:3]}")
    return False


def unsound(ex: Executor, specs: list[GroupSpec]) -> list[str]:
    """What keeps the groups from being sound, read from the kernel: every member runs,
    in its group's pinned namespace (by inode), which has exactly one address, held by
    no other group."""
    problems: list[str] = []
    holders: dict[str, str] = {}
    for spec in specs:
        problems += _group_problems(ex, spec, holders)
    return problems


def _group_problems(ex: Executor, spec: GroupSpec, holders: dict[str, str]) -> list[str]:
    try:
        pin = os.stat(groupns.netns_path(spec.name)).st_ino
    except OSError:
        return [f"{spec.name}: no pin"]
    addrs: set[str] = set()
    for member in MEMBERS:
        task_id = spec.task_id(member)
        try:
            info = ex.inspect(task_id)
        except CtrexecError as exc:
            return [f"{task_id}: {exc}"]
        if info.status is not Status.RUNNING or not info.pid:
            return [f"{task_id}: {info.status.name.lower()}"]
        if _netns_inode(info.pid) != pin:
            return [f"{task_id}: not in the group's namespace"]
        addrs |= {a.address for a in info.addresses or () if a.family == 4}
    if len(addrs) != 1:
        return [f"{spec.name}: {len(addrs)} addresses {sorted(addrs)}"]
    (addr,) = addrs
    other = holders.setdefault(addr, spec.name)
    return [] if other == spec.name else [f"{addr} held by {other} and {spec.name}"]


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def timed(fn: Callable[[], Phase]) -> Phase:
    t0 = time.perf_counter()
    phase = fn()
    phase.seconds = time.perf_counter() - t0
    return phase
