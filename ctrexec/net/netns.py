"""Named network namespaces, the ``ip netns`` way, without a single fork.

A namespace is an empty file ``/run/netns/NAME`` with the namespace's nsfs inode
bind-mounted on it. The mount keeps the namespace alive with no process inside, so
every task of a group can die, restart or be replaced and rejoin the same network
(the reason ctrexec exists; see the design notes).

Why no fork: gRPC channels live in this process and gRPC does not support fork once
a channel exists. ``pyroute2.netns.create`` and ``IPRoute(netns=...)`` fork a helper,
so they are not used. Instead, the network namespace being a per-*thread* attribute,
namespace work happens on a fresh, short-lived thread (see :mod:`ctrexec._linux`):

- :func:`create` unshares CLONE_NEWNET on that thread, bind-mounts
  ``/proc/thread-self/ns/net`` (not ``/proc/self``: that is the main thread's) onto
  the file and sets ``lo`` up with an ioctl, then returns to the host namespace.
- :func:`netlink` setns()es a thread into the namespace, opens a raw NETLINK_ROUTE
  socket there and comes back. A netlink socket stays bound to the namespace it was
  opened in, so the caller drives it from its own thread through
  ``IPRoute(use_socket=...)``.

Names are validated before any call: pyroute2 and ``ip`` take a name containing
"/" as a raw path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ctrexec import _linux, owners
from ctrexec.errors import (
    AlreadyExists,
    CtrexecError,
    FailedPrecondition,
    InvalidArgument,
    NetworkError,
    NotFound,
    PermissionDenied,
)
from ctrexec.net import _pyroute2, nsmarks

if TYPE_CHECKING:
    from ctrexec.paths import StrPath

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Where ``ip netns`` keeps its names; shared with iproute2 on purpose.
NETNS_RUN_DIR = "/run/netns"
#: The host's network namespace, as seen by pid 1.
HOST_NETNS = "/proc/1/ns/net"
NAME_MAX_LEN = 64
#: IFNAMSIZ is 16 including the terminating NUL.
IFNAME_MAX_LEN = 15

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_IFNAME_BAD = re.compile(r"[/:\s]")


# Serialises create/remove within this process so that ``create(exist_ok=True)``
# never observes another thread's half-made namespace (file there, not mounted yet).
_lock = threading.Lock()


@attrs.frozen
class NetNS:
    """A named network namespace: ``path`` is what goes into an OCI spec."""

    name: str
    path: str


# --------------------------------------------------------------------- validation


def validate_name(name: str) -> str:
    """Check an ``ip netns`` name; return it unchanged.

    The rule is stricter than the kernel's: it keeps names usable as a single path
    component and in shells, and rules out ".", ".." and anything with "/".
    """
    if not isinstance(name, str):
        raise InvalidArgument(f"netns name must be a string, not {type(name).__name__}")
    if len(name) > NAME_MAX_LEN:
        raise InvalidArgument(f"netns name {name!r} is longer than {NAME_MAX_LEN} characters")
    if not _NAME_RE.match(name):
        raise InvalidArgument(
            f"invalid netns name {name!r}: use letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )
    return name


def validate_ifname(name: str) -> str:
    """Check a full Linux interface name (the kernel's ``dev_valid_name``)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument("interface name must be a non-empty string")
    if len(name.encode()) > IFNAME_MAX_LEN:
        raise InvalidArgument(f"interface name {name!r} is longer than {IFNAME_MAX_LEN} bytes")
    if name in (".", "..") or _IFNAME_BAD.search(name):
        raise InvalidArgument(f"invalid interface name {name!r}")
    return name


def validate_ifname_part(part: str, *, max_len: int = IFNAME_MAX_LEN) -> str:
    """Check a string that ends up *inside* an interface name (a bridge suffix...).

    Callers pass the room they have left, so the assembled name still fits
    IFNAMSIZ; the character set is the netns-name one.
    """
    if not isinstance(part, str) or not _NAME_RE.match(part):
        raise InvalidArgument(f"invalid interface name part {part!r}")
    if len(part) > max_len:
        raise InvalidArgument(f"{part!r} is longer than {max_len} characters")
    return part


def resolve(spec: str | os.PathLike[str]) -> str:
    """Turn ``--netns NAME|/abs/path`` into a path; never touches the filesystem.

    A bare name means ``/run/netns/NAME``; anything with a "/" must be absolute.
    """
    text = os.fspath(spec)
    if not text or "\0" in text:
        raise InvalidArgument("empty or malformed netns reference")
    if "/" in text:
        return os.path.normpath(_absolute(text))
    return str(Path(NETNS_RUN_DIR) / validate_name(text))


# ------------------------------------------------------------------- verification


def _host_netns_stats() -> list[os.stat_result]:
    """pid 1's namespace and this process's own (its main thread's).

    pid 1's may be unreadable (no ptrace access, e.g. in a sandbox); this process's
    own namespace is then the best stand-in for "the host", and in any case never
    one to hand to a task without asking.
    """
    out = []
    for candidate in (HOST_NETNS, "/proc/self/ns/net"):
        with contextlib.suppress(OSError):
            out.append(Path(candidate).stat())
    return out


def _verify_fd(fd: int, path: str, *, allow_host: bool) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(f"{path} is not a network namespace (not a regular file)")
    if _linux.fstatfs_type(fd) != _linux.NSFS_MAGIC:
        raise InvalidArgument(
            f"{path} is not a network namespace: it is a plain file, not an nsfs "
            "mount (a namespace that was removed, or never bind-mounted)"
        )
    try:
        kind = _linux.ns_type(fd)
    except OSError as exc:  # kernels < 4.11 lack the ioctl; nsfs magic already matched
        if exc.errno not in (errno.ENOTTY, errno.EINVAL):
            raise
        kind = _linux.CLONE_NEWNET
    if kind != _linux.CLONE_NEWNET:
        raise InvalidArgument(f"{path} is a namespace of type {kind:#x}, not a network one")
    if not allow_host and any(_linux.same_file(st, h) for h in _host_netns_stats()):
        raise InvalidArgument(
            f"{path} is the host's network namespace; host networking must be asked for explicitly"
        )
    return st


def _absolute(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not Path(text).is_absolute():
        raise InvalidArgument(f"netns path {text!r} must be absolute")
    return text


def _open_error(path: str, doing: str, exc: OSError) -> CtrexecError:
    if isinstance(exc, FileNotFoundError):
        return NotFound(f"network namespace {path} does not exist")
    if isinstance(exc, PermissionError):
        return PermissionDenied(f"cannot {doing} {path}: {exc.strerror}")
    return NetworkError(f"cannot {doing} {path}: {exc.strerror}")


def _open_ns(path: str) -> int:
    """Open a candidate namespace file without side effects (checked before open)."""
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise _open_error(path, "stat", exc) from exc
    if not stat.S_ISREG(st.st_mode):
        # Opening a FIFO blocks and opening a device can have effects: refuse first.
        raise InvalidArgument(f"{path} is not a network namespace (not a regular file)")
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise _open_error(path, "open", exc) from exc


def _in_verified(
    path: str | os.PathLike[str], action: Callable[[int], T], *, allow_host: bool, doing: str
) -> T:
    """Open ``path``, check it is a network namespace, then ``action(fd)``: the checked
    file and the one acted on are the same open file, whatever is renamed meanwhile."""
    text = _absolute(path)
    fd = _open_ns(text)
    try:
        _verify_fd(fd, text, allow_host=allow_host)
        return action(fd)
    except OSError as exc:
        raise os_error(f"cannot {doing} {text}", exc) from exc
    finally:
        os.close(fd)


def run_inside(path: str | os.PathLike[str], fn: Callable[[], T], *, doing: str) -> T:
    """Verify ``path`` as :func:`verify` does, then call ``fn`` on a fresh thread inside
    it: a socket ``fn`` opens stays bound to that namespace (as :func:`netlink`'s)."""
    return _in_verified(
        path,
        lambda fd: _linux.run_in_fresh_thread(lambda: _linux.in_netns(fd, fn)),
        allow_host=False,
        doing=doing,
    )


def verify(path: str | os.PathLike[str], *, allow_host: bool = False) -> None:
    """Check that ``path`` is a usable network namespace before anyone joins it.

    runc checks almost nothing, so this is where a stale file (a namespace that was
    removed), a mount or pid namespace, or the host's own namespace is refused:
    NotFound when nothing is there, InvalidArgument for everything else.
    """
    _in_verified(path, lambda fd: None, allow_host=allow_host, doing="inspect")


def ensure_loopback_up(path: str | os.PathLike[str]) -> None:
    """Verify ``path`` as :func:`verify` does, then set its ``lo`` up if it is down.

    ``ip netns add`` leaves a new namespace's loopback down, so tasks joined to it
    could not reach each other on 127.0.0.1 ("Network is unreachable"), unlike in
    docker's shared namespaces. Only IFF_UP of ``lo`` is touched; idempotent.
    Fork-free: the ioctl runs on a fresh thread that setns()es into the namespace.
    """

    def lo_up(fd: int) -> None:
        _linux.run_in_fresh_thread(lambda: _linux.in_netns(fd, lambda: _linux.set_link_up("lo")))

    _in_verified(path, lo_up, allow_host=False, doing="bring up lo in")


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a mount point in this process's mount namespace."""
    given = Path(os.path.normpath(Path(os.fspath(path)).absolute()))
    return str(given.parent.resolve() / given.name) in _linux.mount_points()


# ------------------------------------------------------------------ create/remove


def _prepare_run_dir() -> None:
    """Mirror ``ip netns add``: make /run/netns a shared mount point.

    With shared propagation, a namespace mount made after a container started still
    shows up in that container's mount namespace, and a umount here propagates there,
    so the namespace can be freed. If /run/netns is not a mount point, making it
    shared fails with EINVAL; then bind-mount it onto itself and retry, once.
    iproute2 takes an flock on the directory around this (Debian bug #949235:
    concurrent ``ip netns add`` runs stacked thousands of mounts); so do we.
    """
    Path(NETNS_RUN_DIR).mkdir(mode=0o755, exist_ok=True)
    lock = os.open(NETNS_RUN_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as exc:  # like iproute2: warn, proceed
            log.warning("cannot flock %s: %s", NETNS_RUN_DIR, exc)
        made_mount = False
        while True:
            try:
                _linux.mount("", NETNS_RUN_DIR, "none", _linux.MS_SHARED | _linux.MS_REC)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL or made_mount:
                    raise
            _linux.mount(NETNS_RUN_DIR, NETNS_RUN_DIR, "none", _linux.MS_BIND | _linux.MS_REC)
            made_mount = True
    finally:
        os.close(lock)  # also drops the flock


def _unshare_and_pin(path: str) -> None:
    """Runs on a fresh thread: new namespace, pinned at ``path``, ``lo`` up."""

    def inside() -> None:
        _linux.mount(_linux.THREAD_NETNS, path, "none", _linux.MS_BIND)
        _linux.set_link_up("lo")

    _linux.in_netns(None, inside)


def _discard(path: str) -> None:
    """Undo a (partial) namespace file: detach every mount on it, then unlink."""
    for _ in range(16):  # stacked mounts are possible; never loop forever
        try:
            _linux.umount2(path, _linux.MNT_DETACH)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                break
            raise
    Path(path).unlink(missing_ok=True)


def os_error(what: str, exc: OSError) -> CtrexecError:
    """An OSError of a namespace operation, as the error it means to the user."""
    if exc.errno in (errno.EPERM, errno.EACCES):
        return PermissionDenied(f"{what}: {exc.strerror} (needs root / CAP_SYS_ADMIN)")
    return NetworkError(f"{what}: {exc.strerror or exc}")


def create(name: str, *, exist_ok: bool = False, owner: owners.Owner | None = None) -> NetNS:
    """Create and pin ``/run/netns/NAME`` with ``lo`` up; fork-free. Its marker names
    ``owner`` (:mod:`ctrexec.net.nsmarks`); an existing pin of ctrexec's that names
    none is given it.

    AlreadyExists if the name is taken, unless ``exist_ok`` -- then the existing
    file must be a live network namespace (FailedPrecondition otherwise: a stale
    file is not silently reused), or a killed create's empty file, which is finished.
    On any failure nothing is left behind: no file, no mount.
    """
    validate_name(name)
    path = str(Path(NETNS_RUN_DIR) / name)
    with _lock:
        try:
            _prepare_run_dir()
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0)
        except FileExistsError as exc:
            if not exist_ok:
                raise AlreadyExists(f"network namespace {name!r} already exists") from exc
            if _unfinished(path):  # a create killed between the file and its mount
                _pin(name, path, owner)
                log.warning("pinned a new namespace on %s, left empty by a create cut short", path)
                return NetNS(name=name, path=path)
            try:
                verify(path)
            except (InvalidArgument, NotFound) as bad:
                raise FailedPrecondition(
                    f"{path} exists but is not a live network namespace ({bad}); remove it first"
                ) from bad
            if owner is not None and nsmarks.made_by_ctrexec(path) and not nsmarks.owner_of(path):
                nsmarks.mark(path, owner)  # made before owners were recorded
            return NetNS(name=name, path=path)
        except OSError as exc:
            raise os_error(f"cannot create {path}", exc) from exc
        os.close(fd)
        _pin(name, path, owner)
    return NetNS(name=name, path=path)


def _unfinished(path: str) -> bool:
    """The empty, unmounted file a create leaves when killed before its bind mount."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        return stat.S_ISREG(st.st_mode) and st.st_size == 0 and not is_mounted(path)
    return False


def _pin(name: str, path: str, owner: owners.Owner | None) -> None:
    """A new namespace bind-mounted on the empty file ``path``; the file goes on failure."""
    try:
        _linux.run_in_fresh_thread(lambda: _unshare_and_pin(path))
        nsmarks.mark(path, owner)  # netns ls tells ctrexec's from other tools' by it
    except BaseException as exc:
        try:
            _discard(path)
        except OSError:
            log.exception("could not clean up %s after a failed create", path)
        if isinstance(exc, OSError):
            raise os_error(f"cannot create network namespace {name!r}", exc) from exc
        raise


def pin_from(name: str, source: str) -> NetNS:
    """Pin the live namespace at ``source`` (a task's ``/proc/PID/ns/net``) as
    ``/run/netns/NAME`` again, after its pin was lost (``umount``, ``rm``).

    The namespace mounted is the one checked: the bind mount goes through the open
    file's ``/proc/self/fd`` link, so a pid that exits and is reused meanwhile cannot
    swap in another namespace. The pin file must be absent or the empty, unmounted
    file a lost pin leaves (AlreadyExists for a live mount). Nothing is left behind
    on failure, and the host's own namespace is refused.
    """
    validate_name(name)
    path = str(Path(NETNS_RUN_DIR) / name)
    with _lock:
        fd = _open_ns(source)
        try:
            _verify_fd(fd, source, allow_host=False)
            _prepare_run_dir()
            if is_mounted(path):
                raise AlreadyExists(f"network namespace {name!r} is already pinned")
            if not _unfinished(path):
                os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0))
            try:
                _linux.mount(f"/proc/self/fd/{fd}", path, "none", _linux.MS_BIND)
                nsmarks.mark(path, nsmarks.recorded_owner(path))  # the name's owner stays
            except BaseException:
                _discard(path)
                raise
        except OSError as exc:
            raise os_error(f"cannot pin {source} as {path}", exc) from exc
        finally:
            os.close(fd)
    return NetNS(name=name, path=path)


def remove(name_or_path: StrPath) -> None:
    """Unpin a namespace: detach its mount and unlink the file (``ip netns del``).

    NotFound if absent. Refuses anything that is neither a namespace mount nor the
    empty file a crashed create may leave, so a wrong path cannot delete data.
    Processes still inside the namespace keep it alive; it is freed when they exit.
    The kernel frees it asynchronously, in a workqueue: its interfaces (the host end
    of a veth) go a moment after this returns, though nothing here still holds it.
    """
    path = resolve(name_or_path)
    if path == "/proc" or path.startswith("/proc/"):
        raise InvalidArgument(f"refusing to remove {path}")
    with _lock:
        try:
            st = os.lstat(path)
        except FileNotFoundError as exc:
            with contextlib.suppress(OSError):  # removed behind ctrexec's back: its marker
                nsmarks.unmark(path)
            raise NotFound(f"network namespace {path} does not exist") from exc
        except OSError as exc:
            raise os_error(f"cannot stat {path}", exc) from exc
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{path} is not a network namespace file")
        if is_mounted(path):
            fd = _open_ns(path)
            try:
                if _linux.fstatfs_type(fd) != _linux.NSFS_MAGIC:
                    raise InvalidArgument(f"{path} has a non-namespace mount on it")
                with contextlib.suppress(OSError):
                    if _linux.ns_type(fd) != _linux.CLONE_NEWNET:
                        raise InvalidArgument(f"{path} is not a network namespace")
            finally:
                os.close(fd)
        elif st.st_size != 0:
            raise InvalidArgument(f"{path} is a non-empty regular file, not a namespace")
        try:
            _discard(path)
        except OSError as exc:
            raise os_error(f"cannot remove {path}", exc) from exc
        with contextlib.suppress(OSError):  # a stale marker is ignored (nsmarks) anyway
            if str(Path(path).parent) == NETNS_RUN_DIR:
                nsmarks.unmark(path)


def list_namespaces() -> list[NetNS]:
    """Every valid name under /run/netns, sorted; stale files included."""
    try:
        entries = sorted(os.scandir(NETNS_RUN_DIR), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise os_error(f"cannot list {NETNS_RUN_DIR}", exc) from exc
    out = []
    for entry in entries:
        if _NAME_RE.match(entry.name) and len(entry.name) <= NAME_MAX_LEN:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    out.append(NetNS(name=entry.name, path=entry.path))
    return out


# --------------------------------------------------------------------- netlink


def _translate_netlink(exc: Any) -> CtrexecError:
    code = exc.code
    message = f"netlink: {os.strerror(code) if code else exc}"
    if code == errno.EEXIST:
        return AlreadyExists(message)
    if code in (errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.EADDRNOTAVAIL):
        return NotFound(message)
    if code in (errno.EPERM, errno.EACCES):
        return PermissionDenied(message)
    if code == errno.EINVAL:
        return InvalidArgument(message)
    return NetworkError(message)


def _open_rtnl_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    except OSError:
        sock.close()
        raise
    return sock


def load_netlink() -> None:
    """Load pyroute2's ``IPRoute`` now. For a parent that forks its workers
    (:func:`ctrexec.preload`): an ``inspect`` of a running task reads its addresses,
    and each fork would otherwise load it again, about 50 ms of CPU (issue 40)."""
    _pyroute2.load()


@contextlib.contextmanager
def netlink(path: str | os.PathLike[str], *, allow_host: bool = False) -> Iterator[Any]:
    """An ``IPRoute`` whose socket lives in the namespace at ``path``; fork-free.

    The socket is opened on a throwaway thread that setns()es into the namespace;
    the IPRoute itself is built here, on the caller's thread, around that socket.
    Use it only from the thread that entered the ``with``: pyroute2 keeps sockets
    per thread and, from another thread, raises rather than silently opening a new
    socket in the host namespace. NetlinkErrors raised in the body come out as
    ctrexec errors (EEXIST -> AlreadyExists, ENODEV/ENOENT -> NotFound, ...).
    """
    ip_route, netlink_error = _pyroute2.load()  # only here: most callers need no netlink
    sock = _in_verified(
        path,
        lambda fd: _linux.run_in_fresh_thread(lambda: _linux.in_netns(fd, _open_rtnl_socket)),
        allow_host=allow_host,
        doing="open netlink in",
    )
    try:
        ipr = ip_route(use_socket=sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield ipr
    except netlink_error as exc:
        raise _translate_netlink(exc) from exc
    finally:
        ipr.close()
        sock.close()


__all__ = [
    "HOST_NETNS",
    "NETNS_RUN_DIR",
    "NetNS",
    "create",
    "ensure_loopback_up",
    "is_mounted",
    "list_namespaces",
    "netlink",
    "os_error",
    "pin_from",
    "remove",
    "resolve",
    "run_inside",
    "validate_ifname",
    "validate_ifname_part",
    "validate_name",
    "verify",
]
