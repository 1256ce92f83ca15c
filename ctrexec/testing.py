"""Test helpers for ctrexec and for schedulers built on it.

:func:`private_containerd` gives a throwaway containerd with its own root, state and
socket; :func:`audit` lists what a test run left behind in it, :func:`host_audit` what
it left on the host. :func:`wait_for` awaits kernel-asynchronous state with a bound,
and :func:`netns_references` tells whether this process keeps a namespace alive. All
are plain functions so any test framework can use them; ctrexec's fixtures wrap them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ctrexec import _rpc, flocks, procfs
from ctrexec._api.containerd.services.content.v1 import content_pb2
from ctrexec._linux import mount_points, mounts_under, unix_socket_listening
from ctrexec.containerd import containers, snapshots, tasks
from ctrexec.containerd.bundles import SHIM_SOCKET_DIR
from ctrexec.containerd.client import Client
from ctrexec.containerd.daemon import DaemonPaths, EmbeddedContainerd
from ctrexec.logs import daemon as logdaemon
from ctrexec.net.netns import NETNS_RUN_DIR

TEST_ADDRESS_ENV = "CTREXEC_TEST_ADDRESS"


#: Where :func:`private_containerd` makes its directories, and their names' prefix.
PRIVATE_PARENT = Path("/var/tmp")
PRIVATE_PREFIX = "cxd-"
#: A file in each directory :func:`private_containerd` makes, flock-ed by the process
#: that made it for as long as the block runs. The kernel lets go of it when that
#: process dies, so a directory whose lock is free is a killed run's, even while its
#: containerd (a process of its own session) still runs; one whose containerd died
#: under a live run is still that run's.
OWNER_LOCK = "owner.lock"


@contextlib.contextmanager
def private_containerd(base: Path | None = None) -> Iterator[EmbeddedContainerd]:
    """Run a private containerd for the block, then stop it and remove its directories.

    The base directory is short on purpose: unix socket paths are limited to 108 bytes.
    """
    owned = base is None
    base_dir = base or Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=PRIVATE_PARENT))
    owner = _hold(base_dir / OWNER_LOCK)
    daemon = EmbeddedContainerd(DaemonPaths.under(base_dir))
    before = shim_state()
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        remove_dead_shim_state(before)
        if owned and not mounts_under(base_dir):
            shutil.rmtree(base_dir, ignore_errors=True)
        os.close(owner)


def _hold(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def owner_gone(base: Path) -> bool | None:
    """Whether the run that made ``base`` has ended (its :data:`OWNER_LOCK` is free);
    None when the directory has no such lock (not one of :func:`private_containerd`'s,
    or one made before it kept a lock)."""
    lock = base / OWNER_LOCK
    if not lock.exists():
        return None
    return not flocks.held(lock)


#: Where containerd 1.6 puts runc's per-namespace state, whatever the daemon's own state
#: directory: a fixed path, shared by all containerds (the shims' sockets: SHIM_SOCKET_DIR).
RUNC_STATE_DIR = Path("/run/containerd/runc")


def shim_state(sockets: Path = SHIM_SOCKET_DIR, runc: Path = RUNC_STATE_DIR) -> set[Path]:
    """What the shared shim directories hold now (see :func:`remove_dead_shim_state`)."""
    found: set[Path] = set()
    for where in (sockets, runc):
        with contextlib.suppress(OSError):
            found.update(where.iterdir())
    return found


def remove_dead_shim_state(
    before: set[Path],
    *,
    sockets: Path = SHIM_SOCKET_DIR,
    runc: Path = RUNC_STATE_DIR,
    min_age: float = 5.0,
) -> list[Path]:
    """Remove what shims of this run left in the shared directories; returns it.

    A SIGKILLed shim (chaos tests kill some) leaves its socket file, and each
    namespace a shim served leaves an empty runc state directory: containerd removes
    neither. Only entries new since ``before`` go, and only dead ones: an empty
    directory, and a socket older than ``min_age`` seconds that refuses connections
    (so another run's shim between bind and listen is left alone).
    """
    removed: list[Path] = []
    now = time.time()
    for entry in sorted(shim_state(sockets, runc) - before):
        with contextlib.suppress(OSError):
            if entry.parent == sockets:
                if now - entry.lstat().st_mtime >= min_age and not unix_socket_listening(entry):
                    entry.unlink()
                    removed.append(entry)
            elif entry.is_dir() and not any(entry.iterdir()):
                entry.rmdir()  # emptied a moment ago, typically: no age to wait for
                removed.append(entry)
    return removed


def import_image(address: str, namespace: str, archive: Path) -> list[str]:
    """Import an image archive (OCI layout or ``docker save``) with ctrexec's own
    importer, unpacked for the host; returns the names it created."""
    # The archive reader (tarfile, gzip) only for the sessions that import an image.
    from ctrexec.images.importer import import_archive

    with Client.connect(address, namespace=namespace) as client:
        return [image.name for image in import_archive(client, archive)]


def audit(client: Client, *, snapshotter: str = "overlayfs") -> list[str]:
    """What is left in the client's namespace that a clean test run would have removed.

    Committed snapshots belong to unpacked images and are not leaks; active ones are
    container root filesystems and are.
    """
    leftovers: list[str] = [f"task {t.container_id}" for t in tasks.list_tasks(client)]
    leftovers += [f"container {c.id}" for c in containers.list_containers(client)]
    leftovers += [f"lease {le.id}" for le in client.leases()]
    leftovers += [
        f"snapshot {i.name}"
        for i in snapshots.list_snapshots(client, snapshotter)
        if i.kind == "active"
    ]
    return leftovers


def content_digests(client: Client) -> set[str]:
    """Every blob the client's namespace holds in containerd's content store, by digest
    (what a test checks a removal or a GC against)."""
    stream = client._connection.server_stream(
        _rpc.CONTENT,
        "List",
        content_pb2.ListContentRequest(),
        content_pb2.ListContentResponse,
        namespace=client.namespace,
    )
    return {i.digest for page in stream for i in page.info}


def wait_for(
    predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``predicate`` until it is true; AssertionError naming ``what`` after ``timeout``.

    For state the kernel reaches asynchronously (a freed namespace's veth, a cgroup),
    which a test must await with a bound instead of asserting at once.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


#: Bound for the kernel to free a removed network namespace and its interfaces:
#: 10-30 ms on an idle machine, seconds on a loaded one.
NETNS_RELEASE_TIMEOUT = 30.0


def _links(prefix: str) -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix))
    return []


def host_audit(prefix: str, *, settle: float = NETNS_RELEASE_TIMEOUT) -> list[str]:
    """Host objects whose names start with ``prefix``: netns files, mounts, links.

    Files and mounts go synchronously and are listed at once. Links of a removed
    namespace go only when the kernel frees it (asynchronously), so the audit waits
    up to ``settle`` seconds for those to vanish before listing what is left.
    """
    leftovers: list[str] = []
    netns_dir = Path(NETNS_RUN_DIR)
    if netns_dir.is_dir():
        leftovers += [f"netns {p.name}" for p in netns_dir.iterdir() if p.name.startswith(prefix)]
    leftovers += [f"mount {p}" for p in mount_points() if Path(p).name.startswith(prefix)]
    with contextlib.suppress(AssertionError):
        wait_for(lambda: not _links(prefix), timeout=settle, what=f"links named {prefix}*")
    return leftovers + [f"link {name}" for name in _links(prefix)]


_SIOCGSKNS = 0x894C  # linux/sockios.h: an fd of the network namespace of a socket


def _socket_netns(fd: int) -> tuple[int, int] | None:
    try:
        ns_fd = fcntl.ioctl(fd, _SIOCGSKNS)
    except OSError:
        return None
    try:
        st = os.fstat(ns_fd)
        return st.st_dev, st.st_ino
    finally:
        os.close(ns_fd)


def _fd_refers(fd_path: Path, want: tuple[int, int]) -> str | None:
    """How the fd at ``/proc/self/fd/N`` refers to namespace ``want``, if it does."""
    try:
        target = str(fd_path.readlink())
        st = fd_path.stat()  # follows the magic link to the open file itself
    except OSError:
        return None  # closed meanwhile (the fd of this very listing, for one)
    if (st.st_dev, st.st_ino) == want or target == f"net:[{want[1]}]":
        return f"fd {fd_path.name} ({target})"
    if target.startswith("socket:") and _socket_netns(int(fd_path.name)) == want:
        return f"fd {fd_path.name} ({target})"
    return None


def namespace_id(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(st_dev, st_ino) of a namespace: its identity, still valid once its pin is gone."""
    st = Path(path).stat()
    return st.st_dev, st.st_ino


def netns_references(want: tuple[int, int]) -> list[str]:
    """This process's fds, sockets and threads that keep a network namespace alive.

    ``want`` is the namespace's :func:`namespace_id`, taken before it was removed.
    An fd on its nsfs inode (``net:[INODE]``, or opened through a pin path), a
    socket opened inside it (SIOCGSKNS names a socket's namespace) and a thread in
    it all count. Empty means that whatever still delays freeing the namespace is
    not this process.
    """
    found = [
        ref
        for fd_path in list(Path("/proc/self/fd").iterdir())
        if (ref := _fd_refers(fd_path, want)) is not None
    ]
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            st = (task / "ns" / "net").stat()
            if (st.st_dev, st.st_ino) == want:
                found.append(f"thread {task.name}")
    return found


def stop_log_daemon(state_dir: str | os.PathLike[str], timeout: float = 10.0) -> None:
    """Stop the log daemon of ``state_dir`` (by the pid it wrote) and wait until it is gone.

    For test sessions and benchmarks that gave the daemon a directory of their own,
    so the daemon there is theirs to stop.
    """
    try:
        pid = int((Path(state_dir) / logdaemon.PIDFILE).read_text())
    except (OSError, ValueError):
        return
    try:  # a stale pid file must not name some other process
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if logdaemon.NAME.encode() not in argv or os.fsencode(Path(state_dir).absolute()) not in argv:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    wait_for(
        lambda: not procfs.process_alive(pid), timeout=timeout, what=f"log daemon {pid} to exit"
    )
