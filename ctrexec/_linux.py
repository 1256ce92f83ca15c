"""The Linux layer: the one module that calls libc, and the host chores built on it.

Python 3.11 has no ``os.unshare``/``os.setns`` (3.12 does) and no ``mount(2)`` at
all, so these go through libc with ctypes. Nothing here may fork: gRPC channels live
in the same process, and gRPC does not support fork. That is why libc is loaded
lazily with ``CDLL(None)`` (the symbols already in the interpreter) and never through
``ctypes.util.find_library``, which runs ``ldconfig``/``gcc`` in a subprocess.

Namespaces are per-thread attributes. Code that must run inside another namespace
does so in a brand-new thread that exits right after (:func:`run_in_fresh_thread`,
:func:`in_private_mount_namespace`), so no thread that ever left the host's
namespaces is reused.

The syscall wrappers raise plain :class:`OSError` with the real errno; their callers
(:mod:`ctrexec.net.netns`, :mod:`ctrexec.containerd.snapshots`) translate them at
their seam. The helpers that read an untrusted root filesystem raise ctrexec errors
themselves, because they are the seam.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import logging
import os
import signal
import socket
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from ctrexec import errors

log = logging.getLogger(__name__)

T = TypeVar("T")

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 0x1000, 0x4000
MS_PRIVATE, MS_SHARED = 1 << 18, 1 << 20
MNT_DETACH = 0x2
NSFS_MAGIC = 0x6E736673
#: ``_IO(0xb7, 0x3)`` from linux/nsfs.h: answers the CLONE_NEW* type of an nsfs fd.
NS_GET_NSTYPE = 0xB703

#: The calling *thread's* namespace. ``/proc/self`` names the thread-group leader,
#: which is the wrong namespace for a thread that unshared on its own.
THREAD_NETNS = "/proc/thread-self/ns/net"

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: ifr_name[IFNAMSIZ], ifr_flags, padding to 40 bytes


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc, bound on first use: importing ctrexec must stay cheap and fork-free."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.unshare.restype = ctypes.c_int
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.setns.restype = ctypes.c_int
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.mount.restype = ctypes.c_int
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.umount2.restype = ctypes.c_int
    libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fstatfs.restype = ctypes.c_int
    libc.syscall.restype = ctypes.c_long
    return libc


_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent thread ends
    (``PR_SET_PDEATHSIG``; cleared in children it forks): for a worker forked by a
    process that it must not outlive, such as the command line's server's commands or
    a pre-forking scheduler's workers, which would otherwise run on unsupervised."""
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def _check(ret: int, what: str, path: str | None = None) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path)


def _enc(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


# -- syscalls ------------------------------------------------------------------------------


def unshare(flags: int) -> None:
    """unshare(2) for the calling thread only."""
    _check(_libc().unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    """setns(2): move the calling thread into the namespace open at ``fd``."""
    _check(_libc().setns(fd, nstype), "setns")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    """mount(2); ``data`` is the filesystem's option string, if any."""
    ret = _libc().mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data or None))
    _check(ret, "mount", target)


def umount2(target: str, flags: int) -> None:
    """umount2(2)."""
    _check(_libc().umount2(os.fsencode(target), flags), "umount2", target)


def fstatfs_type(fd: int) -> int:
    """The ``f_type`` magic of the filesystem holding ``fd``.

    ``f_type`` is the first member of ``struct statfs`` on every Linux ABI, a
    native ``long`` on the 64-bit ones; the buffer is sized generously for the rest.
    """
    buf = ctypes.create_string_buffer(256)
    _check(_libc().fstatfs(fd, buf), "fstatfs")
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def ns_type(fd: int) -> int:
    """``NS_GET_NSTYPE``: the CLONE_NEW* flag of the namespace behind an nsfs fd."""
    return int(fcntl.ioctl(fd, NS_GET_NSTYPE))


def set_link_up(ifname: str) -> None:
    """Set IFF_UP on ``ifname`` in the calling thread's network namespace.

    Uses the classic SIOCSIFFLAGS ioctl on a throwaway AF_INET socket, which is
    created in -- and therefore acts on -- the current thread's namespace. Used for
    ``lo`` right after unshare, where a full netlink stack would be overkill.
    """
    name = os.fsencode(ifname)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack(_IFREQ, name, 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, req))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, name, flags | _IFF_UP))


def unix_socket_listening(path: str | os.PathLike[str], timeout: float = 1.0) -> bool:
    """Whether a process accepts connections on the unix socket ``path``: a SIGKILLed
    server's socket file stays behind, and only a connect tells the two apart."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except OSError:
            return False
    return True


def boot_time(stat_text: str | None = None) -> float:
    """When the host booted (``btime`` of /proc/stat), in seconds since the epoch."""
    text = Path("/proc/stat").read_text() if stat_text is None else stat_text
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError(errno.ENOENT, "no btime line in /proc/stat")


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Namespace identity is (st_dev, st_ino) of its nsfs inode."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


# -- network namespaces on fresh threads ------------------------------------------------------


class _Box:
    """Carries a thread's return value or exception back to the caller."""

    def __init__(self) -> None:
        self.value: object = None
        self.error: BaseException | None = None


def run_in_fresh_thread(fn: Callable[[], T], *, name: str = "ctrexec-netns") -> T:
    """Run ``fn`` in a new thread that exits when ``fn`` returns; re-raise its error.

    Threads are never reused for namespace work: if ``fn`` fails to restore the
    thread's namespace, the thread dies with it and nothing else ever runs there.
    """
    box = _Box()

    def target() -> None:
        try:
            box.value = fn()
        except BaseException as exc:  # carried to the caller, never swallowed
            box.error = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join()
    if box.error is not None:
        raise box.error
    return box.value  # type: ignore[return-value]


def _restore(orig: int, orig_stat: os.stat_result) -> None:
    """Re-enter the thread's original namespace; log (only) if that fails."""
    try:
        setns(orig, CLONE_NEWNET)
    except OSError as exc:
        log.warning("netns thread could not return to its namespace: %s", exc)
        return
    if not same_file(Path(THREAD_NETNS).stat(), orig_stat):
        log.warning("netns thread is not back in its original namespace")


def in_netns(ns_fd: int | None, fn: Callable[[], T]) -> T:
    """Call ``fn`` on the current (fresh) thread inside a network namespace.

    ``ns_fd`` is an open nsfs fd to enter with setns, or ``None`` to unshare a new
    namespace. The thread's original namespace is re-entered afterwards and checked;
    a failure there is only logged, because the caller runs this on a throwaway
    thread (:func:`run_in_fresh_thread`) that exits right after, so nothing else can
    ever run in the wrong namespace.
    """
    orig = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        orig_stat = os.fstat(orig)
        if ns_fd is None:
            unshare(CLONE_NEWNET)
        else:
            setns(ns_fd, CLONE_NEWNET)
        try:
            return fn()
        finally:
            _restore(orig, orig_stat)
    finally:
        os.close(orig)


# -- mounting in a private mount namespace ---------------------------------------------------


class MountLike(Protocol):
    """What :func:`mount_readonly` needs of a containerd mount (type, source, options)."""

    @property
    def type(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def options(self) -> tuple[str, ...]: ...


#: containerd's mount option words that are flags (``mount_linux.go``); the rest is data.
_FLAG_OPTIONS = {
    "bind": MS_BIND,
    "rbind": MS_BIND | MS_REC,
    "ro": MS_RDONLY,
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
}
_IGNORED_OPTIONS = frozenset(
    {
        "rw",
        "defaults",
        "suid",
        "dev",
        "exec",
        "remount",
        "private",
        "rprivate",
        "shared",
        "rshared",
        "slave",
        "rslave",
        "relatime",
        "noatime",
        "strictatime",
        "sync",
        "async",
    }
)
#: Every mount made for reading is read-only, without setuid, devices or exec.
_SAFE_FLAGS = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC


def _mount_or_raise(
    source: str | None, target: str, fstype: str | None, flags: int, data: str
) -> None:
    """mount(2) with the error these readers have always reported."""
    try:
        mount(source, target, fstype, flags, data)
    except OSError as exc:
        what = f"mount {fstype or 'bind'} {source} on {target}"
        raise _mount_error(what, exc) from exc


def _mount_error(what: str, exc: OSError) -> errors.CtrexecError:
    denied = exc.errno in (errno.EPERM, errno.EACCES)
    cls = errors.PermissionDenied if denied else errors.Internal
    return cls(f"{what}: {os.strerror(exc.errno or 0)}")


def split_options(options: Iterable[str]) -> tuple[int, list[str]]:
    """Split containerd mount options into mount(2) flags and filesystem data."""
    flags, data = 0, []
    for opt in options:
        if opt in _FLAG_OPTIONS:
            flags |= _FLAG_OPTIONS[opt]
        elif opt not in _IGNORED_OPTIONS:
            data.append(opt)
    return flags, data


def compact_lowerdir(data: list[str], limit: int) -> tuple[list[str], str | None]:
    """Shorten a too-long ``lowerdir=`` by making it relative to a common directory.

    The kernel takes at most a page of mount data; containerd chdirs into the
    snapshots directory for that. Returns the new data and the directory to chdir to.
    """
    if len(",".join(data)) < limit:
        return data, None
    idx = next((i for i, d in enumerate(data) if d.startswith("lowerdir=")), None)
    if idx is None:
        return data, None
    dirs = data[idx].removeprefix("lowerdir=").split(":")
    common = os.path.commonpath(dirs)
    if not common or common == "/" or any(d == common for d in dirs):
        return data, None
    rel = [os.path.relpath(d, common) for d in dirs]
    return [*data[:idx], "lowerdir=" + ":".join(rel), *data[idx + 1 :]], common


def mount_readonly(mounts: Sequence[MountLike], target: str, *, writable: bool = False) -> None:
    """Mount ``mounts`` one over the other on ``target``, read-only (unless ``writable``:
    ``cp`` into a stopped container) and always without setuid, devices or exec.

    Call only from a thread inside :func:`in_private_mount_namespace`: a relative
    ``lowerdir`` changes that thread's working directory.
    """
    safe = _SAFE_FLAGS & ~MS_RDONLY if writable else _SAFE_FLAGS
    for m in mounts:
        flags, data = split_options(m.options)
        if m.type == "bind" or flags & MS_BIND:
            _mount_or_raise(m.source, target, None, MS_BIND | (flags & MS_REC), "")
            _mount_or_raise(None, target, None, MS_REMOUNT | MS_BIND | safe, "")
            continue
        data, chdir = compact_lowerdir(data, os.sysconf("SC_PAGE_SIZE") - 1)
        if chdir is not None:
            os.chdir(chdir)
        flags = (flags & ~MS_BIND) | safe
        _mount_or_raise(m.source, target, m.type, flags, ",".join(data))


def unmount_all_at(target: str) -> None:
    """Detach every mount stacked on ``target``."""
    for _ in range(64):
        if _libc().umount2(os.fsencode(target), MNT_DETACH) != 0:
            return


def _enter_private_mount_namespace() -> None:
    try:
        unshare(CLONE_NEWNS)
    except OSError as exc:
        raise _mount_error("unshare mount namespace", exc) from exc
    _mount_or_raise(None, "/", None, MS_REC | MS_PRIVATE, "")


def in_private_mount_namespace(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a new thread that has its own mount namespace, and return its result.

    The namespace (and every mount made in it) ends with the thread; nothing ever
    propagates to the host. Needs CAP_SYS_ADMIN. No fork happens, so it is safe
    while gRPC threads run.
    """

    def body() -> T:
        _enter_private_mount_namespace()
        return fn()

    return run_in_fresh_thread(body, name="ctrexec-mountns")


# -- the host's mount table ---------------------------------------------------------------------


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit() and i + 3 < len(field):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_table(mountinfo: str | None = None) -> list[tuple[str, str]]:
    """Every mount as (mount point, filesystem type), in mount order (parents first)."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text(errors="surrogateescape")
    table = []
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        fields = head.split(" ")
        if len(fields) > 4:
            table.append((_unescape(fields[4]), tail.split(" ", 1)[0]))
    return table


def mount_points(mountinfo: str | None = None) -> list[str]:
    """Every mount point, in mount order (parents before children)."""
    return [point for point, _ in mount_table(mountinfo)]


def mounts_under(directory: Path | str, mountinfo: str | None = None) -> list[str]:
    """Mount points at or below ``directory``."""
    base = os.path.normpath(str(directory))
    return [p for p in mount_points(mountinfo) if p == base or p.startswith(base.rstrip("/") + "/")]


def unmount(path: str) -> None:
    """Lazily detach one mount point; a path that is no longer mounted is fine."""
    try:
        umount2(path, MNT_DETACH)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOENT):  # not a mount point; gone
            raise


def unmount_all(points: list[str]) -> None:
    """Detach mounts children first, ignoring ones already gone."""
    for p in sorted(set(points), key=len, reverse=True):
        with contextlib.suppress(OSError):
            unmount(p)


# -- cgroups --------------------------------------------------------------------------------------

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_v2_only() -> bool:
    """Whether the host has one unified (v2) hierarchy at the root; a v1 or hybrid
    host has one directory per controller there."""
    return (CGROUP_ROOT / "cgroup.controllers").exists()


def join_cpuset_cgroup(relative: str, pid: int, *, cpus: str | None = None) -> None:
    """Move ``pid`` into the v1 cpuset cgroup at ``relative`` (from the cpuset
    hierarchy's root), a cgroup someone else made: its children follow. ``cpus`` are
    written to it first (a cpuset cgroup takes no process until it has cpus). Raises
    FailedPrecondition, naming the file, when the kernel refuses."""
    path = CGROUP_ROOT / "cpuset" / relative.lstrip("/")
    for name, value in (("cpuset.cpus", cpus), ("cgroup.procs", str(pid))):
        if value:
            try:
                (path / name).write_text(value)
            except OSError as exc:
                raise errors.FailedPrecondition(
                    f"cannot write {value} to {path / name}: {exc.strerror}"
                ) from exc


def remove_empty_cgroups(relative: str, *, parents: bool = True) -> bool:
    """rmdir a task's cgroup and, with ``parents``, the parents runc made for it.

    runc removes a task's own cgroup but not the ``/ctrexec/<namespace>`` parents it
    created; the kernel refuses to remove a cgroup that still has children or
    processes, so a parent still in use by another task stays. The top (``ctrexec``)
    is never removed: every namespace shares it, and a runc making another
    namespace's cgroup between its mkdir of the top and of the namespace would find
    the top gone. Returns True when the task's own cgroup is gone from every hierarchy.
    """
    hierarchies = [CGROUP_ROOT, *[p for p in CGROUP_ROOT.iterdir() if p.is_dir()]]
    parts = Path(relative).parts
    gone = True
    for base in hierarchies:
        for depth in range(len(parts), 1 if parents else len(parts) - 1, -1):
            path = base.joinpath(*parts[:depth])
            try:
                path.rmdir()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                if depth == len(parts):
                    gone = False
                break
    return gone


def kill_cgroup_procs(relative: str) -> int:
    """SIGKILL every process left in a task's cgroup once containerd has no task for it.

    A ``runc init`` whose create was cut short (its client killed mid-call) waits on its
    exec FIFO for ever when the shim that started it is gone (seen with containerd
    2.1). Nothing owns it, and the cgroup can't be removed while it is there. Each pid
    is signalled through a pidfd taken while it was listed, so a pid reused meanwhile
    is never hit. The number of processes signalled.
    """
    signalled = 0
    for pid in _cgroup_pids(relative):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # exited meanwhile
        try:
            if pid in _cgroup_pids(relative):  # the pidfd is of the process listed
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                signalled += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return signalled


def _cgroup_pids(relative: str) -> set[int]:
    """The pids in the cgroup at ``relative`` in every hierarchy that has it."""
    pids: set[int] = set()
    for base in [CGROUP_ROOT, *[p for p in CGROUP_ROOT.iterdir() if p.is_dir()]]:
        try:
            pids.update(int(p) for p in (base / relative / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    return pids


# -- files inside a root, never escaping it -------------------------------------------------------

MAX_FILE_BYTES = 16 * 1024 * 1024
_SYS_OPENAT2 = 437  # the same number on every architecture (added after the unified table)
RESOLVE_NO_MAGICLINKS, RESOLVE_IN_ROOT = 0x02, 0x10


def openat2_in_root(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """openat2(2) with ``RESOLVE_IN_ROOT``: open ``path`` as if ``root_fd`` were ``/``.

    A container's files are untrusted: a link such as ``/etc/passwd -> /../../etc/shadow``
    resolves the way the task sees it after pivot_root, and ``..`` stops at the root. The
    kernel does the walk, so a symlink swapped in meanwhile is resolved inside the root
    too; magic links (``/proc/*/root``) are refused. Mount points below the root are
    crossed, as the task crosses them. Raises OSError with the real errno; EAGAIN (a
    rename raced the walk) is retried.
    """
    how = struct.pack("QQQ", flags | os.O_CLOEXEC, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    raw = os.fsencode(path.lstrip("/") or ".")
    libc = _libc()
    for _ in range(16):
        fd = libc.syscall(
            ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(root_fd), raw, how, ctypes.c_size_t(len(how))
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            break
    raise OSError(err, os.strerror(err), path)


def open_root(path: str) -> int:
    """An O_PATH fd of the directory ``path``, to resolve below with the calls here."""
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def path_in_root(root_fd: int, path: str, *, follow: bool = True, directory: bool = False) -> int:
    """An O_PATH fd of ``path`` below the root; the final symlink itself unless ``follow``."""
    flags = os.O_PATH | (0 if follow else os.O_NOFOLLOW) | (os.O_DIRECTORY if directory else 0)
    return openat2_in_root(root_fd, path, flags)


def child_path(dir_fd: int, name: str, *, directory: bool = False) -> int:
    """An O_PATH fd of the entry ``name`` of ``dir_fd``, a symlink never followed."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    return os.open(name, flags, dir_fd=dir_fd)


def open_in_root(root_fd: int, path: str) -> int | None:
    """Open a regular file below ``root_fd`` (see :func:`openat2_in_root`) for reading.

    Returns an fd, or None when there is no regular file there (a FIFO is never
    opened, so it cannot block).
    """
    try:
        pfd = openat2_in_root(root_fd, path, os.O_PATH)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENAMETOOLONG):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(pfd).st_mode):
            return None
        # Re-opening the resolved O_PATH fd through procfs: no second walk to race.
        return os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    finally:
        os.close(pfd)


def read_in_root(
    root: str, paths: Iterable[str], *, max_bytes: int = MAX_FILE_BYTES
) -> dict[str, bytes | None]:
    """Read each path below ``root`` (see :func:`open_in_root`); None when absent."""
    out: dict[str, bytes | None] = {}
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path in paths:
            fd = open_in_root(root_fd, path)
            if fd is None:
                out[path] = None
                continue
            with os.fdopen(fd, "rb") as f:
                data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise errors.ResourceExhausted(f"{path} is larger than {max_bytes} bytes")
            out[path] = data
    finally:
        os.close(root_fd)
    return out
