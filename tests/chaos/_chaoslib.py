"""Helpers for the chaos suite: processes, kill points, and convergence checks.

Nothing here kills by name. Processes are found by what identifies them as ours:
a shim's ``-address`` (our socket), a task's cgroup (``/ctrexec/<namespace>/<id>``,
from the executor's cgroups path) or a log driver's log path (under the test's
directory), and are then signalled by pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs

from ctrexec import _rpc, errors
from ctrexec._api.containerd.services.leases.v1 import leases_pb2
from ctrexec._linux import mounts_under
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.client import LEASE_EXPIRE_LABEL, Client
from ctrexec.containerd.daemon import EmbeddedContainerd
from ctrexec.labels import LOG_PATH, MANAGED
from ctrexec.tasks.config import TaskConfig, config_of
from ctrexec.tasks.executor import Executor
from ctrexec.testing import audit

#: The name the session's ``test_image_archive`` carries (see tests/conftest.py).
IMAGE = "docker.io/library/ctrexec-test:latest"
SHIM = b"containerd-shim-runc-v2"

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.05
) -> T:
    """Poll until ``predicate`` returns something truthy; fail naming ``what`` if never."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# -- processes -------------------------------------------------------------------------


@attrs.frozen
class Proc:
    """A process identity that survives pid reuse: pid plus start time in ticks."""

    pid: int
    start: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command, which may itself contain ") ".
    return text.rsplit(")", 1)[1].split()


def proc(pid: int) -> Proc:
    fields = _stat_fields(pid)
    assert fields is not None, f"process {pid} does not exist"
    return Proc(pid, int(fields[19]))


def ppid(pid: int) -> int:
    fields = _stat_fields(pid)
    assert fields is not None, f"process {pid} does not exist"
    return int(fields[1])


def alive(p: Proc) -> bool:
    """True while the process runs: not gone, not a zombie, not a recycled pid."""
    fields = _stat_fields(p.pid)
    return fields is not None and int(fields[19]) == p.start and fields[0] not in ("Z", "X")


def cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _arg(argv: list[bytes], flag: bytes) -> bytes | None:
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(flag) + 1]
    return None


def shims(address: str, namespace: str | None = None, prefix: str = "") -> list[int]:
    """runc v2 shims serving our containerd (and namespace, and ids with ``prefix``)."""
    found = []
    for pid in all_pids():
        argv = cmdline(pid)
        if not argv or not argv[0].endswith(SHIM):
            continue
        if _arg(argv, b"-address") != address.encode():
            continue
        if namespace is not None and _arg(argv, b"-namespace") != namespace.encode():
            continue
        if not (_arg(argv, b"-id") or b"").startswith(prefix.encode()):
            continue
        found.append(pid)
    return found


def cgroup_members(namespace: str, prefix: str = "") -> list[int]:
    """Live processes in task cgroups the executor made (``/ctrexec/<ns>/<prefix>...``)."""
    start = f"/ctrexec/{namespace}/{prefix}"
    found = []
    for pid in all_pids():
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.split(":", 2)[-1].startswith(start):
                fields = _stat_fields(pid)
                if fields is not None and fields[0] != "Z":
                    found.append(pid)
                break
    return found


def log_drivers(under: Path) -> list[int]:
    """Log driver processes writing below ``under``."""
    prefix = str(under).encode()
    return [
        pid
        for pid in all_pids()
        if any(b"logdriver" in a for a in cmdline(pid)[:3])
        and any(a.startswith(prefix) for a in cmdline(pid))
    ]


def strays(address: str, namespace: str, prefix: str, logs: Path) -> list[str]:
    """Every process of ours that should be gone: shims, task processes, log drivers."""
    out = [f"shim {p}: {cmdline(p)}" for p in shims(address, namespace, prefix)]
    out += [f"task process {p}: {cmdline(p)}" for p in cgroup_members(namespace, prefix)]
    out += [f"log driver {p}: {cmdline(p)}" for p in log_drivers(logs)]
    return out


def kill_strays(address: str, namespace: str, prefix: str, logs: Path) -> list[str]:
    """SIGKILL what :func:`strays` finds, by pid (tasks first, then shims); report it.

    A shim that exits on its own a moment after its last task was deleted is not a
    stray: give the shims a few seconds before calling them that.
    """
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not strays(address, namespace, prefix, logs), "strays", timeout=10)
    found = strays(address, namespace, prefix, logs)
    for pid in [*cgroup_members(namespace, prefix), *log_drivers(logs)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in shims(address, namespace, prefix):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


def cgroup_dirs(namespace: str, prefix: str = "") -> list[Path]:
    """Task cgroups (``<hierarchy>/ctrexec/<namespace>/<prefix>...``) that still exist."""
    root = Path("/sys/fs/cgroup")
    found: list[Path] = []
    for hierarchy in [root, *(p for p in root.iterdir() if p.is_dir())]:
        parent = hierarchy / "ctrexec" / namespace
        with contextlib.suppress(OSError):
            found += [c for c in parent.iterdir() if c.is_dir() and c.name.startswith(prefix)]
    return sorted(found)


def remove_cgroups(namespace: str) -> None:
    """rmdir what is empty of a test namespace's cgroups, leaves first (runc leaves
    the ``ctrexec/<namespace>`` parents behind when a task is deleted directly)."""
    for leaf in cgroup_dirs(namespace):
        with contextlib.suppress(OSError):
            leaf.rmdir()
    root = Path("/sys/fs/cgroup")
    for hierarchy in [root, *(p for p in root.iterdir() if p.is_dir())]:
        # ctrexec's top stays: other namespaces (and other test runs) share it.
        with contextlib.suppress(OSError):
            (hierarchy / "ctrexec" / namespace).rmdir()


def netns_id(path: str | Path) -> tuple[int, int]:
    """(device, inode) of a namespace: equal for a /proc/PID/ns/net and its pin file."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


# -- a containerd to kill ----------------------------------------------------------------


class ChaosDaemon:
    """A private containerd that a test may SIGKILL and start again on the same dirs."""

    def __init__(self, first: EmbeddedContainerd, base: Path, namespace: str) -> None:
        self.first = first
        self.current = first
        self.base = base
        self.paths = first.paths
        self.namespace = namespace
        self._clients: list[Client] = []

    @property
    def address(self) -> str:
        return self.paths.address

    def client(self) -> Client:
        c = Client.connect(self.address, namespace=self.namespace)
        self._clients.append(c)
        return c

    def pid(self) -> int:
        pid = self.current.pid()
        assert pid is not None, "containerd is not running"
        return pid

    def kill(self) -> int:
        """SIGKILL containerd by pid; return once it is gone (and reaped)."""
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not self.current.is_running(), f"containerd {pid} to die")
        return pid

    def restart(self) -> None:
        """Start a new containerd on the same root, state and socket."""
        self.current = EmbeddedContainerd(self.paths)
        self.current.start()

    def close_clients(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()


# -- containerd state ------------------------------------------------------------------


def gc_pass(client: Client) -> None:
    """Make containerd run a garbage collection now (a synchronous lease delete does)."""
    lease = client.create_lease(ttl=None)
    client.delete_lease(lease.id, sync=True)


def lease_resources(client: Client, lease_id: str) -> list[str]:
    resp = client._call(
        _rpc.LEASES,
        "ListResources",
        leases_pb2.ListResourcesRequest(id=lease_id),
        leases_pb2.ListResourcesResponse,
    )
    return sorted(f"{r.type}:{r.id}" for r in resp.resources)


def active_snapshots(client: Client) -> list[str]:
    return sorted(x.removeprefix("snapshot ") for x in audit(client) if x.startswith("snapshot "))


@attrs.frozen
class LeftLease:
    id: str
    labels: dict[str, str]
    resources: list[str]


class Leftover(AssertionError):
    """Something a crash left behind that a clean recovery would not have."""


@attrs.define
class Outcome:
    """What a crash left, seen after the daemon is back."""

    container: bool = False
    complete: bool = False
    task: tasks.Status | None = None
    task_pid: int = 0
    leases: list[LeftLease] = attrs.Factory(list)
    snapshots: list[str] = attrs.Factory(list)

    def kind(self) -> str:
        if self.container:
            return f"container+task:{self.task.value}" if self.task else "container"
        held = "+snapshot" if self.snapshots else ""
        return f"lease{held}" if self.leases else ("snapshot" if self.snapshots else "nothing")


def observe(client: Client, name: str, known_leases: set[str]) -> Outcome:
    """Record the state one crashed create left for container ``name``."""
    out = Outcome()
    try:
        record = containers.get(client, name)
    except errors.NotFound:
        record = None
    if record is not None:
        out.container = True
        rootfs = snapshots.stat_snapshot(client, record.snapshot_key, record.snapshotter)
        # No rootfs yet is complete too: a create cut short between the record and
        # Snapshots.Prepare; start() prepares it (settle() starts such a container).
        out.complete = (
            record.labels.get(MANAGED) == "true"
            and bool(record.labels.get(LOG_PATH))
            and config_of(record) is not None
            and (rootfs is None or rootfs.kind == "active")
        )
        state = tasks.find(client, name)
        if state is not None:
            out.task, out.task_pid = state.status, state.pid
    out.leases = [
        LeftLease(le.id, dict(le.labels), lease_resources(client, le.id))
        for le in client.leases()
        if le.id not in known_leases
    ]
    out.snapshots = active_snapshots(client)
    return out


def converge(ex: Executor, name: str, out: Outcome) -> None:
    """Bring one crashed create to "nothing": destroy the container if there is one.

    Asserts what must hold whatever the crash point: a container that exists is
    complete and ``destroy(force=True)`` removes it with its task and snapshot; what
    is left then is only leases that expire (``containerd.io/gc.expire``) and the
    snapshots they hold.
    """
    client = ex.client
    if out.container:
        assert out.complete, f"container {name} exists but is incomplete"
        ex.destroy(name, force=True)
    with contextlib.suppress(errors.NotFound):
        containers.get(client, name)
        raise AssertionError(f"container {name} is still there after destroy")
    assert tasks.find(client, name) is None, f"task {name} is still there"
    left = [le for le in out.leases if le.id in {x.id for x in client.leases()}]
    for le in left:
        assert LEASE_EXPIRE_LABEL in le.labels, f"lease {le} never expires: a permanent leak"
    held = {r.rsplit(":", 1)[-1] for le in left for r in le.resources}
    orphans = [s for s in active_snapshots(client) if s not in held]
    if orphans:
        gc_pass(client)
        orphans = [s for s in active_snapshots(client) if s not in held]
    assert orphans == [], f"active snapshots no container or lease holds: {orphans}"


def release_leases(client: Client, out: Outcome) -> None:
    """Do now what the leases' expiry would do later: delete them, collect garbage."""
    for le in out.leases:
        with contextlib.suppress(errors.NotFound):
            client.delete_lease(le.id, sync=True)
    gc_pass(client)


# -- kill points -----------------------------------------------------------------------

#: Points inside Executor.start_task, as (module, attribute, before|after a call).
KILL_POINTS: dict[str, tuple[str, str, str]] = {
    "after-hostfiles": ("ctrexec.net.hostfiles", "ensure", "after"),
    "before-prepare": ("ctrexec.containerd.snapshots", "prepare_rootfs", "before"),
    "before-container-create": ("ctrexec.containerd.containers", "create", "before"),
    "after-container-create": ("ctrexec.containerd.containers", "create", "after"),
    "before-task-create": ("ctrexec.containerd.tasks", "create", "before"),
    "before-task-start": ("ctrexec.containerd.tasks", "start", "before"),
    "after-task-start": ("ctrexec.containerd.tasks", "start", "after"),
}

#: Points inside Executor.destroy (``rm -f``), as for KILL_POINTS.
DESTROY_KILL_POINTS: dict[str, tuple[str, str, str]] = {
    "before-container-delete": ("ctrexec.containerd.containers", "delete", "before"),
    "after-container-delete": ("ctrexec.containerd.containers", "delete", "after"),
    "before-snapshot-remove": ("ctrexec.containerd.snapshots", "remove_snapshot", "before"),
}

#: What a SIGKILL at each kill point leaves, as :meth:`Outcome.kind`: the same whether
#: containerd dies there (and is started again) or ctrexec does (containerd stays up).
LEFT_AFTER_KILL: dict[str, str] = {
    # The task's host files are written only once the record exists.
    "after-hostfiles": "container",
    # The record comes first and needs no lease (containerd's GC holds the snapshot
    # it names from the first instant): a crash before it leaves nothing at all...
    "before-container-create": "nothing",
    # ... and one after it a record without its rootfs yet, which start() prepares.
    "after-container-create": "container",
    "before-prepare": "container",
    "before-task-create": "container",
    "before-task-start": "container+task:created",
    "after-task-start": "container+task:running",
}


def hook(module: Any, attr: str, when: str, action: Callable[[], None]) -> Callable[[], None]:
    """Run ``action`` just before or after ``module.attr`` runs; return an undo."""
    *path, name = attr.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if when == "before":
            action()
        result = original(*args, **kwargs)
        if when == "after":
            action()
        return result

    setattr(owner, name, hooked)
    return lambda: setattr(owner, name, original)


# -- after a crash ---------------------------------------------------------------------


@attrs.frozen
class Scope:
    """Where one test's objects live, for its leak checks."""

    address: str  # containerd socket
    namespace: str  # containerd namespace
    prefix: str  # every container id the test makes starts with it
    logs: Path  # the executor's log_dir
    daemon_dir: Path  # nothing may stay mounted below it
    netns_files: Callable[[], list[Path]]  # host-file dirs of the test's namespaces


def settle(
    ex: Executor,
    name: str,
    out: Outcome,
    scope: Scope,
    *,
    retry: TaskConfig | None,
    restart: bool = True,
) -> None:
    """After a crash inside start_task: recover as a scheduler would, then check leaks.

    1. A container without a running task is started again (``restart``).
    2. :func:`converge`: destroy; only expiring leases may be left.
    3. No netns host files remain without a container.
    4. ``retry``: start_task with the same name works while those leases still live.
    5. With the leases gone (as after their expiry), nothing at all is left: no
       containerd object, shim, task process, log driver or mount.

    Leftovers of 1, 3 and 4 are raised together as :class:`Leftover` at the end, once
    everything is cleaned, so an expected failure still leaves the daemon clean.
    """
    problems: list[str] = []
    if restart and out.container and out.task is not tasks.Status.RUNNING:
        try:
            h = ex.start(name)
        except errors.CtrexecError as exc:
            problems.append(f"start() of the surviving container fails: {exc!r}")
        else:
            assert alive(proc(h.pid)), "start() returned a pid that is not running"
    converge(ex, name, out)
    files = scope.netns_files()
    if files:
        problems.append(f"netns host files left with no container: {files}")
    if retry is not None:
        try:
            ex.start_task(retry)
        except errors.AlreadyExists as exc:
            problems.append(f"the name {name} cannot be used again: {exc}")
        else:
            ex.destroy(retry.name, force=True)
    if out.leases:  # they expire (containerd.io/gc.expire); nothing else deletes them
        print(f"{name}: leases left by the crash: {out.leases}")
    release_leases(ex.client, out)
    assert audit(ex.client) == [], "a leak that no lease expiry would clean"
    wait_for(
        lambda: not strays(scope.address, scope.namespace, scope.prefix, scope.logs),
        "no shim, task process or log driver of the test: "
        f"{strays(scope.address, scope.namespace, scope.prefix, scope.logs)}",
    )
    wait_for(lambda: not cgroup_dirs(scope.namespace, name), "the task's cgroup to go", 10)
    assert mounts_under(scope.daemon_dir) == []
    if problems:
        raise Leftover("; ".join(problems))


# -- containerd's bundles ----------------------------------------------------------------

#: The runtime v2 plugin's directory under a containerd's state directory.
BUNDLE_ROOT = "io.containerd.runtime.v2.task"


def bundles(state: Path, namespace: str, prefix: str) -> list[str]:
    """Task bundles (``<state>/io.containerd.runtime.v2.task/<ns>/<id>``) of ids with ``prefix``."""
    where = state / BUNDLE_ROOT / namespace
    with contextlib.suppress(OSError):
        return sorted(p.name for p in where.iterdir() if p.name.startswith(prefix))
    return []


def bundle_procs(state: Path, namespace: str, prefix: str) -> list[str]:
    """Processes working in such a bundle: a shim, or a ``runc init`` whose shim is gone
    (runc runs in the bundle; a deleted one still shows as the process's cwd)."""
    where = os.fspath(state / BUNDLE_ROOT / namespace / prefix)
    found = []
    for pid in all_pids():
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd").startswith(where):
                fields = _stat_fields(pid)
                if fields is not None and fields[0] != "Z":
                    found.append(f"process {pid} in a bundle: {cmdline(pid)}")
    return found
